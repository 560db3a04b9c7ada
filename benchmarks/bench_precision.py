"""Float32 against float64 Sinkhorn solves on the costs training sees: time, iterations, error, plan gap.

    python -m benchmarks.bench_precision

Ten consecutive batches of 300 embeddings (10 Gaussian classes of std 0.8 around centers of std 2,
the scale of the embedding at lambda = 1/300), warm-started from the previous batch's g as in
training, epsilon = 1e-2, tol = 1e-5 (the system's defaults), one thread. ``auto`` is the solver's
rule (float64 here, since float32 cannot resolve the tolerance at these costs).
"""

from __future__ import annotations

import time
import warnings

import torch

from lit_otclust.sinkhorn import sinkhorn, squared_distances


def main() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # float32 does not converge: that is what is measured
    torch.manual_seed(0)
    centers = torch.randn(10, 10) * 2.0
    z_all = centers[torch.randint(0, 10, (3000,))] + 0.8 * torch.randn(3000, 10)
    plans = {}
    print("dtype   | ms/solve | iterations | max column error | cost max")
    for name, dtype in (("auto", None), ("float32", torch.float32), ("auto", None)):
        g, seconds, iters, errors, plans[name] = None, 0.0, 0, [], []
        for batch in z_all.split(300):
            cost = squared_distances(batch, centers)
            start = time.perf_counter()
            res = sinkhorn(cost, epsilon=1e-2, tol=1e-5, g_init=g, dtype=dtype)
            seconds += time.perf_counter() - start
            g, iters = res.g, iters + res.n_iter
            errors.append(res.marginal_error)
            plans[name].append(res.plan)
        print(f"{name:7s} | {seconds / 10 * 1e3:8.1f} | {iters / 10:10.1f} | {max(errors):16.2e} | {cost.max():.0f}")
    gap = max((a - b).abs().max().item() for a, b in zip(plans["auto"], plans["float32"]))
    print(f"max |P_float32 - P_auto| = {gap:.2e} = {gap * 300:.1%} of a point's mass 1/300")


if __name__ == "__main__":
    main()
