"""A training step eager against ``torch.compile``d: the autoencoder, the fixed-iteration OT loss, or both.

    python -m benchmarks.bench_compile [--device cpu] [--mode default] [--steps 20] [--rounds 7] [--threads 1]

The step is the bare loop's (``benchmarks/bare_loop.py``) with ``model.loss.init_args.solver: fixed``: the MNIST MLP
autoencoder on a batch of 300, the summed squared reconstruction error, lambda = 1/300 times
``ot_clustering_loss(..., solver="fixed", iters=--iters)`` warm-started from the previous step's g, backward, fused
Adam. Random images (a fixed solve's work does not depend on the values). Compiled: ``nn.Module.compile(mode=...)``
for the autoencoder (its state dict keeps its keys) and ``torch.compile(ot_clustering_loss, mode=...)``, what
``model.compile`` does in ``fit``. Each variant is warmed up (compiled) first and its compile time printed, the first
compiled loss is compared with the eager one, then blocks of ``--steps`` steps alternate for ``--rounds`` rounds and
the median ms a step is printed, of wall time and of this process's CPU time (on a CPU shared with other work, the
steadier figure). ``--mode reduce-overhead`` adds CUDA graphs on a GPU.
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.harness import alternate, median, table
from lit_otclust.losses import ot_clustering_loss
from lit_otclust.models import MLPAutoencoder


class Step:
    """One variant's model, centers, optimiser and step; ``compile_ae``/``compile_loss`` pick what is compiled."""

    def __init__(self, device: str, compile_ae: bool, compile_loss: bool, mode: str, iters: int) -> None:
        torch.manual_seed(0)
        self.model = MLPAutoencoder().to(device)
        if compile_ae:
            self.model.compile(mode=mode)
        self.centers = torch.nn.Parameter(torch.randn(10, 10, device=device))
        self.opt = torch.optim.Adam([*self.model.parameters(), self.centers], lr=1e-3, fused=True)
        self.loss = torch.compile(ot_clustering_loss, mode=mode) if compile_loss else ot_clustering_loss
        self.w = torch.full((10,), 0.1, device=device)
        self.g = torch.zeros(10, device=device)
        self.x = torch.rand(300, 784, device=device)
        self.iters = iters
        self.sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def __call__(self) -> float:
        z, x_hat = self.model(self.x)
        recon = (x_hat - self.x).pow(2).flatten(1).sum(1).mean()
        clust, res = self.loss(z, self.centers, self.w, epsilon=0.01, g_init=self.g, solver="fixed",
                               iters=self.iters)
        self.g.copy_(res.g)  # copied, as DeepClustering keeps g_last: a CUDA graph's output is overwritten next replay
        loss = recon + clust / 300
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def block(self, steps: int) -> tuple[float, float]:
        """ms a step over ``steps`` steps: wall and this process's CPU time."""
        self.sync()
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            self()
        self.sync()
        return 1e3 * (time.perf_counter() - start) / steps, 1e3 * (time.process_time() - cpu) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--mode", default="default", choices=["default", "reduce-overhead", "max-autotune"])
    p.add_argument("--iters", type=int, default=10, help="sinkhorn_iters")
    p.add_argument("--steps", type=int, default=20, help="steps a block")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--variants", nargs="+", default=["eager", "autoencoder", "loss", "both"],
                   choices=["eager", "autoencoder", "loss", "both"])
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.device}, {torch.get_num_threads()} thread(s), mode {a.mode}, "
          f"fixed solve {a.iters} iterations, {a.steps} steps a block, {a.rounds} rounds")
    flags = {"eager": (False, False), "autoencoder": (True, False), "loss": (False, True), "both": (True, True)}
    steps = {name: Step(a.device, *flags[name], a.mode, a.iters) for name in a.variants}
    first = {}
    for name, step in steps.items():
        start = time.perf_counter()
        first[name] = step().item()
        for _ in range(3):  # a compiled function recompiles once g_init and the parameters' grads exist
            step()
        step.sync()
        print(f"  {name}: first 4 steps (compiling) {time.perf_counter() - start:.1f} s, first loss {first[name]:.6f}")
    blocks = alternate({name: (lambda s=step: s.block(a.steps)) for name, step in steps.items()}, a.rounds, log=False)
    rows = []
    for n, b in blocks.items():
        wall, cpu = [w for w, _ in b], [c for _, c in b]
        ratios = []
        if "eager" in blocks:  # round by round, each block over the eager block of its round
            ratios = [f"{median([x[i] / y[i] for x, y in zip(b, blocks['eager'])]):.3f}x" for i in (0, 1)]
        rows.append([n, f"{median(wall):.2f}", f"{min(wall):.2f}-{max(wall):.2f}", f"{median(cpu):.2f}", *ratios,
                     f"{first[n] - first.get('eager', first[n]):.2g}"])
    table(["variant", "ms/step", "range", "cpu ms/step", *(["/ eager", "cpu / eager"] if "eager" in blocks else []),
           "first loss - eager's"], rows)


if __name__ == "__main__":
    main()
