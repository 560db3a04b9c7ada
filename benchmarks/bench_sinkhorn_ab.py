"""``ot_clustering_loss`` on two versions of the solver, on one device, alternating blocks in one process: a
solver change's A/B.

    git show REV:lit_otclust/sinkhorn.py > /tmp/sinkhorn_old.py
    python -m benchmarks.bench_sinkhorn_ab --old /tmp/sinkhorn_old.py [--device cuda] [--noise 0.05]

``--old`` is a copy of ``lit_otclust/sinkhorn.py`` (``lit_otclust/ot.py`` before the solver and the losses were two
files) from another revision (it imports only torch): its solvers replace the working tree's ("new") inside
``lit_otclust.losses``. The problem looks like late training: 300 points around 10 centers in 10-d, epsilon 1e-2,
tol 1e-5, warm ``g``, each call on freshly jittered points (``--noise``). Prints the median ms of a loss and its
backward over 12 blocks of 20 calls, the median ratio of paired blocks, and on CUDA the host syncs, kernel launches
and copies a call (``torch.profiler``).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from lit_otclust import losses, sinkhorn as new

SOLVERS = ("squared_distances", "sinkhorn", "sinkhorn_fixed", "sinkhorn_algorithm1")  # what losses calls


def problem(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Late training's shape: z (300, 10) around centers (10, 10) (both requiring grad), uniform w (10,), and the
    warm start g (10,) of a first solve at epsilon 1e-2. Seeded."""
    torch.manual_seed(0)
    centers = torch.randn(10, 10, device=device).requires_grad_()
    z = (centers.detach()[torch.arange(300) % 10] + torch.randn(300, 10, device=device)).requires_grad_()
    w = torch.full((10,), 0.1, device=device)
    return z, centers, w, losses.ot_clustering_loss(z, centers, w, epsilon=0.01, tol=1e-5)[1].g


def compare(calls: dict[str, Callable[[], object]], sync: Callable[[], None], device: str, blocks: int = 12,
            per_block: int = 20) -> None:
    """Time two calls in alternating blocks (the first leads in even blocks), print the median ms of each and the
    median ratio of paired blocks (second / first); on CUDA also the host syncs, kernel launches and copies a call."""
    (a, call_a), (b, call_b) = calls.items()
    times: dict[str, list[float]] = {a: [], b: []}
    for block in range(blocks):
        order = [(a, call_a), (b, call_b)]
        for name, call in order if block % 2 == 0 else order[::-1]:
            sync()
            t = time.perf_counter()
            for _ in range(per_block):
                call()
            sync()
            times[name].append((time.perf_counter() - t) / per_block)
    for name, ts in times.items():
        print(f"{name}: {1e3 * statistics.median(ts):.2f} ms per loss+backward (median of {blocks} blocks of {per_block})")
    print(f"{b}/{a}: {statistics.median([y / x for x, y in zip(times[a], times[b])]):.3f}")
    if device.startswith("cuda"):
        for name, call in calls.items():
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(per_block):
                    call()
                sync()
            counts = {e.key: e.count for e in prof.key_averages()}
            print(name, "per call:", *(f"{k} {counts.get(k, 0) / per_block}" for k in
                                       ("cudaStreamSynchronize", "cudaLaunchKernel", "cudaMemcpyAsync")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, help="path of the other revision's lit_otclust/sinkhorn.py")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--noise", type=float, default=0.05)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("ot_old", args.old)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    dev = args.device
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    z, centers, w, g0 = problem(dev)
    iters = []

    def call(mod) -> None:
        for name in SOLVERS:  # an older revision may lack one: the working tree's stays
            setattr(losses, name, getattr(mod, name, getattr(new, name)))
        loss, res = losses.ot_clustering_loss(z + args.noise * torch.randn_like(z), centers, w, epsilon=0.01,
                                              tol=1e-5, g_init=g0)
        loss.backward()
        iters.append(res.n_iter)

    compare({"old": lambda: call(old), "new": lambda: call(new)}, sync, dev)
    print(f"mean Sinkhorn iterations + Newton steps a call: {statistics.mean(iters):.1f}")


if __name__ == "__main__":
    main()
