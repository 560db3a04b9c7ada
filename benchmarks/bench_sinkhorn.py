"""Seconds a solve of ``lit_otclust.sinkhorn.sinkhorn`` against POT's log-domain Sinkhorn on the torch backend.

    python -m benchmarks.bench_sinkhorn [--eps 0.01 0.1] [--rounds 3] [--pot-max-iter 1000] [--threads 1]

Costs are unnormalised squared distances between random 10-d embeddings and centers (as in the paper), uniform
weights, float64. Both solvers get the same stopping threshold; POT's is on the L2 column error (looser than our
L1), and POT gets an iteration cap so that the slowest rows finish: where POT hits its cap (``*``), its error column
shows how far it got, and the speedup is a lower bound. Errors are recomputed here the same way for both: the L1
error of the column marginal (rows are exact for both). The two solvers alternate, ``--rounds`` times each, and the
medians are printed.
"""

from __future__ import annotations

import argparse
import time
import warnings
from functools import partial

import ot as pot
import torch

from benchmarks.harness import alternate, median
from lit_otclust.sinkhorn import sinkhorn, squared_distances

SIZES = [(300, 10), (3000, 10), (3000, 100), (10000, 1000)]


def ours(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, eps: float, tol: float) -> tuple[float, int, float]:
    """Seconds, iterations and column L1 error of our solve."""
    start = time.perf_counter()
    res = sinkhorn(cost, a, b, epsilon=eps, tol=tol, warn=False)
    return time.perf_counter() - start, res.n_iter, (res.plan.sum(0) - b).abs().sum().item()


def theirs(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, eps: float, tol: float,
           cap: int) -> tuple[float, int, float]:
    """Seconds, iterations and column L1 error of POT's log-domain solve, at most ``cap`` iterations."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sinkhorn did not converge")  # its error column says how far
        plan, log = pot.sinkhorn(a, b, cost, eps, method="sinkhorn_log", stopThr=tol, numItermax=cap, log=True)
    return time.perf_counter() - start, log["niter"] + 1, (plan.sum(0) - b).abs().sum().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eps", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="n1 K1 n2 K2 ...; default: all of SIZES")
    parser.add_argument("--pot-max-iter", type=int, default=1000)
    parser.add_argument("--pot-max-iter-large", type=int, default=50, help="POT's cap for (10000, 1000)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for both solvers; 1 is steadier on a shared machine")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sizes = list(zip(args.sizes[::2], args.sizes[1::2])) if args.sizes else SIZES

    print(f"torch {torch.__version__}, POT {pot.__version__}, {torch.get_num_threads()} thread(s), float64, "
          f"tol {args.tol:g}, median of {args.rounds}")
    print(f"{'(n, K)':>13} {'eps':>5} | {'ours s':>8} {'iters':>5} {'L1 err':>8} | {'POT s':>8} {'iters':>6} "
          f"{'L1 err':>8} | speedup")
    for n, k in sizes:
        gen = torch.Generator().manual_seed(0)
        cost = squared_distances(torch.randn(n, 10, generator=gen, dtype=torch.float64),
                                 torch.randn(k, 10, generator=gen, dtype=torch.float64))
        a = torch.full((n,), 1.0 / n, dtype=torch.float64)
        b = torch.full((k,), 1.0 / k, dtype=torch.float64)
        cap = args.pot_max_iter_large if n * k >= 10**7 else args.pot_max_iter
        for eps in args.eps:
            solvers = {"ours": partial(ours, cost, a, b, eps, args.tol),
                       "pot": partial(theirs, cost, a, b, eps, args.tol, cap)}
            runs = alternate(solvers, args.rounds, log=False)
            (o_s, o_it, o_err), (p_s, p_it, p_err) = ((median([r[0] for r in runs[m]]), *runs[m][-1][1:])
                                                      for m in ("ours", "pot"))
            capped = "*" if p_it >= cap else " "
            print(f"{(n, k)!s:>13} {eps:>5g} | {o_s:8.3f} {o_it:5d} {o_err:8.1e} | {p_s:8.3f} "
                  f"{p_it:5d}{capped} {p_err:8.1e} | {p_s / o_s:6.1f}x{'+' if capped == '*' else ''}", flush=True)
    print("* POT stopped at its iteration cap before reaching tol; + speedup is then a lower bound.")


if __name__ == "__main__":
    main()
