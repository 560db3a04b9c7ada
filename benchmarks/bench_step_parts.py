"""What the system's training step computes beyond the bare loop's, part by part, interleaved in one process.

    python -m benchmarks.bench_step_parts --data-dir ../shared/data [--blocks 30] [--threads 1]
    python -m benchmarks.bench_step_parts --data-dir ../shared/data --pieces [--threads 1]

``bench_step`` splits a ``fit`` step into Lightning's loop (fit / by hand) and the system's own work (by hand /
bare). This splits the second part. From one state (an untrained MLP autoencoder, k-means centers of 5,000
embeddings), four copies train on the same batches of full MNIST, ``--blocks`` blocks of 20 steps each, in
alternating order:

- bare: ``benchmarks.bare_loop.train_steps`` (the model, centers and a fused Adam, no Lightning);
- by hand: ``DeepClustering.training_step``, backward, ``on_before_optimizer_step`` (the finite-gradient check
  before Adam's step) and the step, as ``bench_step`` runs it;
- by hand, no gradient check: the same without ``on_before_optimizer_step``;
- the loss alone: the bare loop's steps on a copy of the module's own autoencoder, centers and optimizer (two
  parameter groups): a control that the module and its optimizer cost nothing by themselves.

So "by hand" minus "no gradient check" is the check's cost, and "no gradient check" over "the loss alone" is what
the step computes for its logs (assignments, train/acc, the plan's statistics, the running potential, the loss's finite
check). Printed: the median ms a step, the median of the blocks' ratios to bare, the mean Sinkhorn
iterations a step (the copies train apart by rounding, and a step's cost follows its iterations), and the
ATen operators a step of each copy dispatches (``torch.profiler``, one more block after the timing).

``--pieces`` times instead each piece of that extra work alone, on one batch after one step (so the gradients are
there): the best of 5 x 200 calls, in microseconds, and the ATen operators it dispatches.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import timeit

import torch

from benchmarks.bare_loop import train_steps
from lit_otclust.cli import skip_nvml_check_without_gpus
from lit_otclust.clustering import kmeans
from lit_otclust.data import MNISTDataModule
from lit_otclust.models import MLPAutoencoder
from lit_otclust.system import DeepClustering
from torch.utils._python_dispatch import TorchDispatchMode

BLOCK, BATCH = 20, 300


class OpCount(TorchDispatchMode):
    """Counts the ATen operators dispatched inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def pieces(system: DeepClustering, x: torch.Tensor, y: torch.Tensor) -> None:
    """Print the microseconds and operators of each piece of the training step that the bare loop does not run."""
    module = copy.deepcopy(system)
    opt = module.configure_optimizers()["optimizer"]
    module.on_train_epoch_start()
    xb, yb = x[:BATCH], y[:BATCH]
    loss = module.training_step((xb, yb, torch.arange(BATCH)), 0)
    loss.backward()
    z = module.embed(xb)
    nearest = module.assign(z, "distance")
    labelled = yb >= 0
    stats = {"loss": loss.detach(), "recon": loss.detach(), "cluster": loss.detach(), "plan_moved": loss.detach()}
    parts = {
        "nearest center (train/acc, plan_moved)": lambda: module.assign(z, "distance"),
        "train/acc metric update": lambda: module.metrics["train_distance"].update(nearest[labelled], yb[labelled]),
        "finite-loss check": lambda: bool(torch.isfinite(loss.detach())),
        "statistics' running sums (4 tensors)": lambda: {k: module._train_sums.get(k, 0.0) + v
                                                         for k, v in stats.items()},
        "finite-gradient check": lambda: module.on_before_optimizer_step(opt),
    }
    print(f"the step's pieces beyond the bare loop's, one batch of {BATCH}, threads {torch.get_num_threads()}:")
    for name, part in parts.items():
        part()
        with OpCount() as count:
            part()
        seconds = min(timeit.repeat(part, number=200, repeat=5)) / 200
        print(f"  {name:40s} {seconds * 1e6:7.1f} us  {count.ops:3d} ATen ops")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pieces", action="store_true", help="time each piece of the extra work alone instead")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    skip_nvml_check_without_gpus()  # as the fit's main() does, so Adam's steps cost what they cost in a fit
    dm = MNISTDataModule(data_dir=args.data_dir, download=False)
    dm.setup("fit")
    x, y = dm.fit_set.x, dm.fit_set.y
    torch.manual_seed(0)
    system = DeepClustering(MLPAutoencoder(), clustering="ot", clustering_weight=1 / 300)
    system.centers.data.copy_(kmeans(system.embed(x[:5000]), 10, n_init=1, seed=0))
    system.joint = True
    if args.pieces:
        pieces(system, x, y)
        return

    def bare_loop(model: torch.nn.Module, centers: torch.Tensor, opt: torch.optim.Optimizer):
        g = [None]  # the previous batch's potential, the next solve's warm start

        def run(batches: list[torch.Tensor]) -> float:
            g[0], iters = train_steps(model, centers, opt, x, batches, system.proportions,
                                      system.hparams.clustering_weight, g[0])
            return float(sum(iters))
        return run

    def by_hand(check: bool):
        module = copy.deepcopy(system)
        opt = module.configure_optimizers()["optimizer"]
        module.on_train_epoch_start()

        def run(batches: list[torch.Tensor]) -> float:
            before = float(module._train_sums.get("sinkhorn_iters", 0.0))
            for i, idx in enumerate(batches):
                loss = module.training_step((x[idx], y[idx], idx), i)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if check:
                    module.on_before_optimizer_step(opt)
                opt.step()
            return float(module._train_sums["sinkhorn_iters"]) - before
        return run

    model, centers = copy.deepcopy(system.autoencoder), torch.nn.Parameter(system.centers.detach().clone())
    bare_opt = torch.optim.Adam([*model.parameters(), centers], lr=system.hparams.lr, fused=True)
    control = copy.deepcopy(system)  # the bare loop's steps on the module's own tensors and two-group optimizer
    control_opt = control.configure_optimizers()["optimizer"]
    variants = {"bare": bare_loop(model, centers, bare_opt), "by hand": by_hand(True),
                "by hand, no gradient check": by_hand(False),
                "the loss alone": bare_loop(control.autoencoder, control.centers, control_opt)}
    ms: dict[str, list[float]] = {name: [] for name in variants}
    iters = dict.fromkeys(variants, 0.0)
    generator = torch.Generator().manual_seed(0)
    for block in range(args.blocks):
        batches = list(torch.randperm(len(x), generator=generator)[: BLOCK * BATCH].split(BATCH))
        for name in (list(variants) if block % 2 == 0 else list(reversed(variants))):
            start = time.perf_counter()
            iters[name] += variants[name](batches)
            ms[name].append((time.perf_counter() - start) / BLOCK * 1e3)
    batches = list(torch.randperm(len(x), generator=generator)[: BLOCK * BATCH].split(BATCH))
    ops = {}
    for name, run in variants.items():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            run(batches)
        ops[name] = sum(e.name.startswith("aten::") for e in prof.events()) / BLOCK
    print(f"mnist, {args.blocks} blocks of {BLOCK} steps, threads {args.threads}")
    for name, times in ms.items():
        ratio = statistics.median(a / b for a, b in zip(times, ms["bare"]))
        print(f"  {name:27s} {statistics.median(times):6.2f} ms a step   {ratio:.3f}x bare (median of the blocks' ratios)"
              f"   {iters[name] / (args.blocks * BLOCK):.1f} Sinkhorn iterations a step   {ops[name]:.0f} ATen ops a step")


if __name__ == "__main__":
    main()
