"""The Sinkhorn block eager against ``torch.compile``d, in ``ot_clustering_loss`` as training calls it: is a GPU
step's launch count (``benchmarks/bench_gpu_step.py``: ~800 kernels a step, ~300 of them the block's ten
iterations) worth fusing?

    python -m benchmarks.bench_sinkhorn_compile [--device cuda] [--noise 0.05]

``lit_otclust.ot._sinkhorn_inplace`` (the ``check_every`` iterations before the Newton finish) is swapped for its
``torch.compile`` (inductor, ``dynamic=False``); the block's one host sync stays a graph break. The problem is
``bench_sinkhorn_ab``'s (300 points, 10 centers in 10-d, epsilon 1e-2, tol 1e-5, warm g, jittered points each call).
Prints the compile time, the largest difference of the loss and of the plan between the two (the same arithmetic,
so rounding only), the median ms of a loss and its backward over alternating blocks, and on CUDA the kernel
launches a call. Measured on this project's CPU only so far, where it checks the numbers, not the speed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.bench_sinkhorn_ab import problem
from lit_otclust import ot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--blocks", type=int, default=12)
    args = parser.parse_args()
    dev = args.device
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    z, centers, w, g0 = problem(dev)
    eager, compiled = ot._sinkhorn_inplace, torch.compile(ot._sinkhorn_inplace, dynamic=False)

    def call(block, zz: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ot._sinkhorn_inplace = block
        try:
            loss, res = ot.ot_clustering_loss(zz, centers, w, epsilon=0.01, tol=1e-5, g_init=g0)
            loss.backward()
        finally:
            ot._sinkhorn_inplace = eager
        return loss.detach(), res.plan

    zz = z + args.noise * torch.randn_like(z)
    sync()
    t = time.perf_counter()
    loss_c, plan_c = call(compiled, zz)
    sync()
    print(f"first compiled call (compiles): {time.perf_counter() - t:.1f} s")
    loss_e, plan_e = call(eager, zz)
    print(f"compiled - eager: loss {abs(loss_c - loss_e).item():.3g}, plan max {(plan_c - plan_e).abs().max().item():.3g}")
    times = {"eager": [], "compiled": []}
    for block in range(args.blocks):
        order = (("eager", eager), ("compiled", compiled))
        for name, fn in order if block % 2 == 0 else order[::-1]:
            sync()
            t = time.perf_counter()
            for _ in range(20):
                call(fn, z + args.noise * torch.randn_like(z))
            sync()
            times[name].append((time.perf_counter() - t) / 20)
    for name, ts in times.items():
        print(f"{name}: {1e3 * statistics.median(ts):.2f} ms per loss+backward (median of {args.blocks} blocks of 20)")
    print(f"compiled/eager: {statistics.median([c / e for c, e in zip(times['compiled'], times['eager'])]):.3f}")
    if dev.startswith("cuda"):
        for name, fn in (("eager", eager), ("compiled", compiled)):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    call(fn, z + args.noise * torch.randn_like(z))
                sync()
            counts = {e.key: e.count for e in prof.key_averages()}
            print(name, "per call: cudaLaunchKernel", counts.get("cudaLaunchKernel", 0) / 20,
                  "cudaStreamSynchronize", counts.get("cudaStreamSynchronize", 0) / 20)


if __name__ == "__main__":
    main()
