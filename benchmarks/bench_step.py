"""Per-step time of ``lit_otclust fit`` against the bare loop's steps, interleaved in one process.

    python -m benchmarks.bench_step --data-dir ../shared/data [--epochs 4] [--block 20] [--threads 1] [FIT OVERRIDES]

``bench_fit`` times the two as separate processes, alternately; on this shared machine the bare
loop itself then moves by more than the 5% the per-step goal allows (21 to 32 ms a step between
runs), and even blocks of one epoch each (~8 s) gave per-epoch ratios from 0.95x to 1.37x. Here one
``python -m lit_otclust fit --config configs/mnist_ot.yaml`` (as a user runs it: loggers, progress
bar, checkpoints, evaluation) carries the :class:`Interleave` callback. After every ``block`` fit
steps it runs ``block`` steps of two references, in alternating order, each on its own copy of the
state taken at the first joint step:

- bare: ``benchmarks.bare_loop.train_steps`` (the model, centers and a fused Adam, no Lightning);
- by hand: the system's own ``training_step``, backward, gradient check and Adam step on a copy of
  the module, called in a plain loop.

Each block of fit steps is timed from the end of the references before it to its last step, so a
block of the fit and its references lie within ~2 s of each other and drifts of the machine cancel
in their ratio. fit / by hand is Lightning's loop (hooks, closure, data fetching, progress bar,
loggers); by hand / bare is what the system computes beyond the bare loop (assignments, train/acc,
the plan's statistics, the finite checks). Sinkhorn iterations are printed for the fit and the bare
copy: the copies train apart, and a step's cost follows its iterations. On a GPU (``--trainer.accelerator gpu``)
each block's ends synchronise the device. ``--profile-block N`` runs block N of each kind under ``torch.profiler``
instead of timing it and prints its per-step counts: aten operators, host reads, launches, syncs and copies.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

from benchmarks.bare_loop import train_steps
from benchmarks.bench_fit import REPO


COUNTED = ("aten::item", "cudaStreamSynchronize", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync")


def _sync(module: torch.nn.Module) -> None:
    """Wait for the accelerator, so a block's time is its work, not its launches (a no-op on the CPU)."""
    if module.device.type == "cuda":
        torch.cuda.synchronize(module.device)


def _counts(prof: torch.profiler.profile, steps: int) -> dict[str, float]:
    """Per step: host syncs (``aten::item``, ``cudaStreamSynchronize``), kernel launches and copies, and all
    ``aten::`` operator calls (each one a dispatch the host pays, on any device)."""
    events = prof.key_averages()
    counts = {e.key: e.count / steps for e in events if e.key in COUNTED}
    counts["aten ops"] = sum(e.count for e in events if e.key.startswith("aten::")) / steps
    return counts


class Interleave(L.Callback):
    """Every ``block`` training steps, time ``block`` bare and by-hand steps; write the blocks' times to ``path``.
    The blocks numbered ``profile_block`` (counting from 0) run under ``torch.profiler`` instead, and their
    per-step counts of host syncs, launches and operator calls are written too."""

    def __init__(self, path: str, block: int = 20, profile_block: int = -1) -> None:
        self.path, self.block, self.profile_block = path, block, profile_block
        self.rows: list[dict] = []
        self.profiled: dict[str, dict[str, float]] = {}
        self._prof: torch.profiler.profile | None = None
        self._bare = self._hand = None
        self._start, self._count, self._iters = 0.0, 0, 0.0

    def _copies(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The references' state: the fit's at its first joint step (after PhaseSwitch's k-means init)."""
        model = copy.deepcopy(pl_module.autoencoder)
        centers = torch.nn.Parameter(pl_module.centers.detach().clone())
        opt = torch.optim.Adam([*model.parameters(), centers], lr=pl_module.hparams.lr, fused=True)
        self._bare = [model, centers, opt, None, torch.Generator().manual_seed(0)]
        trainer_ref, pl_module._trainer = pl_module._trainer, None  # copy the module, not the trainer
        try:
            module = copy.deepcopy(pl_module)
        finally:
            pl_module._trainer = trainer_ref
        module.on_train_epoch_start()
        self._hand = [module, module.configure_optimizers()["optimizer"], torch.Generator().manual_seed(1)]

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not pl_module.joint:
            return
        if self._bare is None:
            self._copies(trainer, pl_module)
        if batch_idx == 0:  # a block never spans the evaluation between epochs
            self._restart(pl_module)

    def _profiling(self) -> bool:
        return len(self.rows) == self.profile_block  # set to -1 once the block is profiled

    def _profiler(self, pl_module) -> torch.profiler.profile:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if pl_module.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        return torch.profiler.profile(activities=activities)

    def _restart(self, pl_module) -> None:
        _sync(pl_module)
        self._count, self._iters = 0, float(pl_module._train_sums.get("sinkhorn_iters", 0.0))
        if self._prof is not None:  # a profiled block cut by the epoch's end: profile the next one whole
            self._prof.__exit__(None, None, None)
            self._prof = None
        if self._profiling():
            self._prof = self._profiler(pl_module).__enter__()
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._bare is None:
            return
        self._count += 1
        if self._count < self.block:
            return
        _sync(pl_module)
        fit_s = time.perf_counter() - self._start
        profiling = self._prof is not None
        if profiling:
            self._prof.__exit__(None, None, None)
            self.profiled["fit"], self._prof = _counts(self._prof, self.block), None
        fit_iters = (float(pl_module._train_sums["sinkhorn_iters"]) - self._iters) / self.block
        hp, data = pl_module.hparams, trainer.datamodule.fit_set
        batch_size = len(batch[0])

        def bare() -> float:
            model, centers, opt, g, generator = self._bare
            batches = torch.randperm(len(data.x), generator=generator)[: self.block * batch_size].split(batch_size)
            start = time.perf_counter()
            g, iters = train_steps(model, centers, opt, data.x, batches, pl_module.proportions, hp.clustering_weight,
                                   g, epsilon=hp.epsilon, tol=hp.sinkhorn_tol, max_iter=hp.sinkhorn_max_iter)
            _sync(pl_module)
            seconds = time.perf_counter() - start
            self._bare[3], self._bare_iters = g, sum(iters) / len(iters)
            return seconds

        def by_hand() -> float:
            module, opt, generator = self._hand
            batches = torch.randperm(len(data.x), generator=generator)[: self.block * batch_size].split(batch_size)
            start = time.perf_counter()
            for i, idx in enumerate(batches):
                loss = module.training_step((data.x[idx], data.y[idx], idx), i)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                module.on_before_optimizer_step(opt)
                opt.step()
            _sync(pl_module)
            return time.perf_counter() - start

        def measured(name: str, run) -> float:
            if not profiling:
                return run()
            with self._profiler(pl_module) as prof:
                seconds = run()
            self.profiled[name] = _counts(prof, self.block)
            return seconds

        order = (("bare", bare), ("hand", by_hand)) if len(self.rows) % 2 == 0 else (("hand", by_hand), ("bare", bare))
        seconds = {name: measured(name, run) for name, run in order}
        if profiling:  # the profiled block's times are the profiler's, not the step's: not a row
            self.profile_block = -1
            self._restart(pl_module)
            return
        ms = 1e3 / self.block
        self.rows.append({"epoch": trainer.current_epoch, "fit_ms": fit_s * ms, "hand_ms": seconds["hand"] * ms,
                          "bare_ms": seconds["bare"] * ms, "fit_iters": fit_iters, "bare_iters": self._bare_iters})
        self._restart(pl_module)

    def on_fit_end(self, trainer, pl_module) -> None:
        Path(self.path).write_text(json.dumps({"rows": self.rows, "profiled": self.profiled}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=["mnist", "cifar10"], default="mnist")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--block", type=int, default=20, help="steps of each kind between switches")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--profile-block", type=int, default=-1,
                        help="run this block (from 0) of each kind under torch.profiler and print its counts a step")
    args, fit_args = parser.parse_known_args()
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "WANDB_SILENT": "true"}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "blocks.json"
        cmd = [sys.executable, "-m", "lit_otclust", "fit", "--config", f"configs/{args.dataset}_ot.yaml",
               "--trainer.max_epochs", str(args.epochs), "--data.data_dir", str(Path(args.data_dir).resolve()),
               "--trainer.default_root_dir", f"{tmp}/run", "--trainer.enable_progress_bar", "true",
               "--trainer.callbacks+=benchmarks.bench_step.Interleave", f"--trainer.callbacks.init_args.path={out}",
               f"--trainer.callbacks.init_args.block={args.block}",
               f"--trainer.callbacks.init_args.profile_block={args.profile_block}", *fit_args]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        record = json.loads(out.read_text())
        rows, profiled = record["rows"], record["profiled"]
    print(f"{args.dataset}, {args.epochs} epochs, threads {args.threads or torch.get_num_threads()}, "
          f"{len(rows)} blocks of {args.block} steps each of fit, by hand and bare")
    print("  epoch | blocks | fit ms/step | by hand | bare | fit/bare | hand/bare | fit/hand | Sinkhorn iters fit / bare")
    for epoch in sorted({r["epoch"] for r in rows}):
        rs = [r for r in rows if r["epoch"] == epoch]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        pair = {name: statistics.median(r[a] / r[b] for r in rs) for name, a, b in
                (("fb", "fit_ms", "bare_ms"), ("hb", "hand_ms", "bare_ms"), ("fh", "fit_ms", "hand_ms"))}
        print(f"  {epoch:5d} | {len(rs):6d} | {med['fit_ms']:11.2f} | {med['hand_ms']:7.2f} | {med['bare_ms']:6.2f} | "
              f"{pair['fb']:8.3f} | {pair['hb']:9.3f} | {pair['fh']:8.3f} | {med['fit_iters']:.1f} / {med['bare_iters']:.1f}")
    for label, a, b in (("fit/bare", "fit_ms", "bare_ms"), ("by hand/bare", "hand_ms", "bare_ms"),
                        ("fit/by hand", "fit_ms", "hand_ms")):
        ratios = sorted(r[a] / r[b] for r in rows)
        q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
        print(f"  {label:12s}: median of the blocks' ratios {statistics.median(ratios):.3f}x "
              f"(quartiles {q1:.3f}-{q3:.3f}, {len(ratios)} blocks)")
    print(f"  median ms a step: fit {statistics.median(r['fit_ms'] for r in rows):.2f}, by hand "
          f"{statistics.median(r['hand_ms'] for r in rows):.2f}, bare {statistics.median(r['bare_ms'] for r in rows):.2f}")
    for name, counts in profiled.items():
        print(f"  profiled block, {name}, a step: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
