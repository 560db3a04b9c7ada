"""Whole-process time of ``lit_otclust fit`` against the bare PyTorch loop doing the same work.

    python -m benchmarks.bench_fit --data-dir ../shared/data [--dataset mnist] [--epochs 3] [--pairs 3] [FIT OVERRIDES]
    python -m benchmarks.bench_fit --fit-only --epochs 10 --pairs 1 [FIT OVERRIDES, e.g. --trainer.accelerator gpu]

Runs ``python -m lit_otclust fit --config configs/<dataset>_ot.yaml --trainer.max_epochs E`` (the
config as a user runs it: CSV and offline W&B logging, a checkpoint every epoch, evaluation on the
fitted images and the test split every epoch) and ``python -m benchmarks.bare_loop`` alternately,
``pairs`` times each, and prints the median wall time and CPU time (user + system, children
included) of each, their ratios, and the per-step and evaluation times both report. The fit's
step and evaluation times come from :class:`StepTimer`, added with ``--trainer.callbacks``.
``--fit-only`` times the fit alone (where the bare loop is no reference, e.g. on a GPU:
``benchmarks/gpu_check.sh``) and prints what a 200-epoch run of it would take. ``--lean`` adds a third process to
each pair, the same fit with its features beyond the bare loop's work off (``LEAN``: no loggers, no checkpoints, no
pictures; the progress bar, evaluation's NMI and ARI and the training statistics stay): what the framework costs
apart from them. Each pair then runs the three in an order rotated from pair to pair.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L

REPO = Path(__file__).resolve().parents[1]
# The fit without the outputs the bare loop does not write (``--lean``).
LEAN = ["--trainer.logger", "false", "--trainer.enable_checkpointing", "false", "--figures.every_n_epochs", "0",
        "--figures.final", "false"]


class StepTimer(L.Callback):
    """Seconds of training batches and of evaluation per epoch, written as JSON to ``path`` at the end."""

    def __init__(self, path: str) -> None:
        self.path, self.train_s, self.eval_s, self.steps = path, 0.0, 0.0, 0
        self._t = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # From the epoch's first batch, as the bare loop times it: the k-means initialisation that
        # PhaseSwitch runs at the start of the first joint epoch is outside both (the bare loop runs it
        # before its clock starts), and counted in the "rest" column with start-up and shut-down.
        if batch_idx == 0:
            self._t = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps += 1

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit":
            self.train_s += time.perf_counter() - self._t
        self._t = time.perf_counter()

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self.eval_s += time.perf_counter() - self._t

    def on_fit_end(self, trainer, pl_module) -> None:
        Path(self.path).write_text(json.dumps({"train_s": self.train_s, "eval_s": self.eval_s, "steps": self.steps,
                                               "ms_per_step": 1e3 * self.train_s / max(self.steps, 1)}))


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + sys of the child and its children) and stdout of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def commands(dataset: str, epochs: int, data_dir: str, run_dir: str, callback: str, callback_path: Path,
             fit_args: list[str]) -> tuple[list[str], list[str]]:
    """The fit (``configs/<dataset>_ot.yaml`` as a user runs it, plus ``callback`` writing to ``callback_path``) and
    the bare loop's command lines, for the same data and epochs."""
    fit = [sys.executable, "-m", "lit_otclust", "fit", "--config", f"configs/{dataset}_ot.yaml",
           "--trainer.max_epochs", str(epochs), "--data.data_dir", data_dir,
           "--trainer.default_root_dir", run_dir, "--trainer.enable_progress_bar", "true",
           f"--trainer.callbacks+={callback}", f"--trainer.callbacks.init_args.path={callback_path}", *fit_args]
    bare = [sys.executable, "-m", "benchmarks.bare_loop", "--dataset", dataset, "--epochs", str(epochs),
            "--data-dir", data_dir]
    return fit, bare


def alternate(pair: int, fit: list[str], bare: list[str], lean: list[str] | None = None) -> tuple[tuple[str, list[str]], ...]:
    """The pair's runs, named, in an order rotated from pair to pair (so a slow drift of the machine weighs on all
    alike): the fit first in even pairs and the bare loop first in odd ones; with ``lean``, fit, lean, bare rotated
    by one each pair."""
    runs = [("fit", fit), *([("lean", lean)] if lean else []), ("bare", bare)]
    first = pair % len(runs)
    return tuple(runs[first:] + runs[:first])


def pair_parser(doc: str) -> argparse.ArgumentParser:
    """The options of a benchmark that runs the fit and the bare loop in alternating pairs; parse it with
    ``parse_known_args``: any other argument is an override for the fit, e.g. ``--trainer.logger=false``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=["mnist", "cifar10"], default="mnist")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=3)
    return parser


def child_env() -> dict[str, str]:
    """The environment of the timed processes: W&B offline (unless set) and quiet."""
    return {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "WANDB_SILENT": "true"}


def main() -> None:
    parser = pair_parser(__doc__)
    parser.add_argument("--fit-only", action="store_true", help="time the fit alone, with the 200-epoch estimate")
    parser.add_argument("--lean", action="store_true", help="also time the fit with loggers, checkpoints and pictures "
                                                            "off, in each pair")
    args, fit_args = parser.parse_known_args()
    env = child_env()
    data_dir = str(Path(args.data_dir).resolve())
    rows: dict[str, list[tuple[float, float, dict]]] = {"fit": [], **({"lean": []} if args.lean else {}), "bare": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            timer_file = Path(tmp) / f"timer{pair}.json"
            fit, bare = commands(args.dataset, args.epochs, data_dir, f"{tmp}/run{pair}",
                                 "benchmarks.bench_fit.StepTimer", timer_file, fit_args)
            order = alternate(pair, fit, bare, [*fit, *LEAN] if args.lean else None)
            for name, cmd in [run for run in order if run[0] == "fit"] if args.fit_only else order:
                wall, cpu, out = timed(cmd, env)
                # The fits' times from StepTimer's file, the bare loop's from its last line.
                info = json.loads(out.strip().splitlines()[-1] if name == "bare" else timer_file.read_text())
                rows[name].append((wall, cpu, info))
                print(f"pair {pair} {name:4s}: wall {wall:6.1f} s  cpu {cpu:6.1f} s  "
                      f"{info['ms_per_step']:.1f} ms/step  eval {info['eval_s'] / args.epochs:.2f} s/epoch", flush=True)
    if args.fit_only:
        for wall, _, info in rows["fit"]:
            epoch = (info["train_s"] + info["eval_s"]) / args.epochs
            rest = wall - args.epochs * epoch
            print(f"fit: {args.epochs} epochs in {wall:.1f} s: {info['ms_per_step']:.2f} ms a step, evaluation "
                  f"{info['eval_s'] / args.epochs:.2f} s an epoch, {epoch:.2f} s an epoch in all, {rest:.1f} s outside "
                  f"the epochs; 200 epochs: about {(200 * epoch + rest) / 60:.1f} min")
        return
    med = {name: {"wall": statistics.median(r[0] for r in rs), "cpu": statistics.median(r[1] for r in rs),
                  "step": statistics.median(r[2]["ms_per_step"] for r in rs),
                  "eval": statistics.median(r[2]["eval_s"] / args.epochs for r in rs),
                  "epoch": statistics.median((r[2]["train_s"] + r[2]["eval_s"]) / args.epochs for r in rs)}
           for name, rs in rows.items()}
    print(f"\n{args.dataset}, {args.epochs} epochs, median of {args.pairs} (run alternately):")
    print("            |  wall s |   cpu s | ms/step | eval s/epoch | eval share of epoch | rest s")
    for name in rows:
        m = med[name]
        # rest: the wall time outside the epochs' batches and evaluations (imports, set-up, the k-means
        # init, loggers, checkpoints, final pictures, shut-down): fixed costs, which a long run amortises.
        rest = m["wall"] - args.epochs * m["epoch"]
        print(f"  {name:9s} | {m['wall']:7.1f} | {m['cpu']:7.1f} | {m['step']:7.1f} | {m['eval']:12.2f} | "
              f"{m['eval'] / m['epoch']:19.1%} | {rest:6.1f}")
    b = med["bare"]
    for name in [n for n in rows if n != "bare"]:
        f = med[name]
        label = "ratio" if name == "fit" else f"{name}/bare"
        print(f"  {label:9s} | {f['wall'] / b['wall']:6.2f}x | {f['cpu'] / b['cpu']:6.2f}x | "
              f"{f['step'] / b['step']:6.2f}x |")
    # Within a pair both ran back to back, so their ratio cancels slow drifts of the machine; the spread of these
    # ratios says how far the medians above can be trusted.
    for name in [n for n in rows if n != "bare"]:
        for label, key in (("wall", lambda r: r[0]), ("ms/step", lambda r: r[2]["ms_per_step"])):
            paired = [key(rf) / key(rb) for rf, rb in zip(rows[name], rows["bare"])]
            print(f"  {'' if name == 'fit' else name + ' '}{label} ratio within each pair: "
                  f"{', '.join(f'{r:.2f}x' for r in paired)} (median {statistics.median(paired):.2f}x)")


if __name__ == "__main__":
    main()
