"""The Sinkhorn block eager against ``torch.compile``d, in ``ot_clustering_loss`` as training calls it: is a GPU
step's launch count (``benchmarks/bench_gpu_step.py``: ~800 kernels a step, ~300 of them the block's ten
iterations) worth fusing?

    python -m benchmarks.bench_sinkhorn_compile [--device cuda] [--noise 0.05]

``lit_otclust.sinkhorn._sinkhorn_inplace`` (the ``check_every`` iterations before the Newton finish) is swapped for its
``torch.compile`` (inductor, ``dynamic=False``); the block's one host sync stays a graph break. The problem is
``bench_sinkhorn_ab``'s (300 points, 10 centers in 10-d, epsilon 1e-2, tol 1e-5, warm g, jittered points each call).
Prints the compile time, the largest difference of the loss and of the plan between the two (the same arithmetic,
so rounding only), the median ms of a loss and its backward over alternating blocks, and on CUDA the kernel
launches a call. Measured on this project's CPU only so far, where it checks the numbers, not the speed.
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.bench_sinkhorn_ab import compare, problem
from lit_otclust import losses, sinkhorn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--blocks", type=int, default=12)
    args = parser.parse_args()
    dev = args.device
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    z, centers, w, g0 = problem(dev)
    eager, compiled = sinkhorn._sinkhorn_inplace, torch.compile(sinkhorn._sinkhorn_inplace, dynamic=False)

    def call(block, zz: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sinkhorn._sinkhorn_inplace = block
        try:
            loss, res = losses.ot_clustering_loss(zz, centers, w, epsilon=0.01, tol=1e-5, g_init=g0)
            loss.backward()
        finally:
            sinkhorn._sinkhorn_inplace = eager
        return loss.detach(), res.plan

    zz = z + args.noise * torch.randn_like(z)
    sync()
    t = time.perf_counter()
    loss_c, plan_c = call(compiled, zz)
    sync()
    print(f"first compiled call (compiles): {time.perf_counter() - t:.1f} s")
    loss_e, plan_e = call(eager, zz)
    print(f"compiled - eager: loss {abs(loss_c - loss_e).item():.3g}, plan max {(plan_c - plan_e).abs().max().item():.3g}")
    compare({"eager": lambda: call(eager, z + args.noise * torch.randn_like(z)),
             "compiled": lambda: call(compiled, z + args.noise * torch.randn_like(z))}, sync, dev, blocks=args.blocks)


if __name__ == "__main__":
    main()
