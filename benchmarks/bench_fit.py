"""The marginal epoch of ``lit_otclust fit`` against the bare PyTorch loop doing the same work, start-up apart.

    python -m benchmarks.bench_fit --data-dir ../shared/data --epochs 1 3 --rounds 3 --threads 1 \\
        --variant solve "" --variant fixed "--model.loss.init_args.solver fixed --model.loss.init_args.iters 10" \\
        --bare solve fixed [FIT OVERRIDES]
    git worktree add ../before <commit> && python -m benchmarks.bench_fit --epochs 1 4 --rounds 5 --threads 1 \\
        --variant now "" --variant before "" --checkout before ../before --bare fixed      (a change's cost)
    python -m benchmarks.bench_fit --epochs 5 20 --rounds 1 --variant fixed "..." --concurrent 1 2 4 8 \\
        --data.init_args.on_device true --trainer.accelerator gpu --trainer.devices 1      (benchmarks/gpu_check.sh)

Each variant is ``python -m lit_otclust fit --config configs/<dataset>_ot.yaml`` (or ``--config PATH``) as a user
runs it (CSV and offline W&B logging, a checkpoint and an evaluation every epoch) with the variant's and the common
overrides; ``--bare`` adds ``benchmarks/bare_loop.py`` with the named solvers (``bare-solve``, ``bare-fixed``).
Every (variant, epochs) process runs once a round, in an order rotated each round. A round's marginal epoch is
``(wall(E2) - wall(E1)) / (E2 - E1)``: what one more epoch costs, with the start-up, the k-means init and the
shut-down (the same in both) taken out; its fixed cost is ``wall(E1) - E1 * marginal``. Printed: the medians over
the rounds, the range, the 200-epoch projection ``fixed + 200 * marginal``, each variant's marginal epoch over its
bare loop's (``bare-NAME`` for variant NAME, else the first bare loop; round by round), the fit's own per-step time
(:class:`StepTimer`), and the marginal epoch in CPU seconds (user + system, the same difference): on a machine whose
cores other work shares, a steadier figure than the wall's. ``--checkout NAME PATH`` runs variant NAME's fit in another
checkout of this repository, e.g. the code before a change (``python -m`` imports the package from the working
directory). ``--concurrent N ...`` then starts N copies of the first
variant at once at E2 epochs, for each N (each with OMP_NUM_THREADS = cores / N unless ``--threads``; N = 1 is the
single run's E2 fit above, not run again), and prints
runs per hour, with a 200-epoch projection that scales each run's time beyond the single run's fixed cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L

from benchmarks.harness import REPO, child_env, median, rotated, table, timed


class StepTimer(L.Callback):
    """Seconds of the training batches and of evaluation, summed over the fit, written as JSON to ``path`` at its
    end; each epoch's training from its first batch's start to its last batch's end, as the bare loop times it (an
    epoch without evaluation counts too: ``check_val_every_n_epoch``)."""

    def __init__(self, path: str) -> None:
        self.path, self.train_s, self.eval_s, self.steps = path, 0.0, 0.0, 0
        self._t = self._last = self._v = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == 0:
            self._t = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps += 1
        self._last = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:  # after the epoch's evaluation, if it has one
        self.train_s += self._last - self._t

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._v = time.perf_counter()

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self.eval_s += time.perf_counter() - self._v

    def on_fit_end(self, trainer, pl_module) -> None:
        Path(self.path).write_text(json.dumps({"train_s": self.train_s, "eval_s": self.eval_s, "steps": self.steps,
                                               "ms_per_step": 1e3 * self.train_s / max(self.steps, 1)}))


def fit_command(config: str, epochs: int, data_dir: str, run_dir: str, timer: Path, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "lit_otclust", "fit", "--config", config,
            "--trainer.max_epochs", str(epochs), "--data.data_dir", data_dir, "--trainer.default_root_dir", run_dir,
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--trainer.callbacks+=benchmarks.bench_fit.StepTimer", f"--trainer.callbacks.init_args.path={timer}", *args]


def bare_command(dataset: str, epochs: int, data_dir: str, solver: str, iters: int, device: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.bare_loop", "--dataset", dataset, "--epochs", str(epochs),
            "--data-dir", data_dir, "--solver", solver, "--iters", str(iters), "--device", device]


def run_once(name: str, epochs: int, a: argparse.Namespace, fits: dict[str, list[str]], tmp: str, tag: str,
             env: dict[str, str]) -> tuple[float, float, float]:
    """One process of variant ``name`` at ``epochs``: (wall seconds, CPU seconds, ms a training step)."""
    timer = Path(tmp) / f"timer_{tag}.json"
    if name in fits:
        cmd = fit_command(a.config, epochs, a.data_dir, f"{tmp}/run_{tag}", timer, fits[name])
    else:
        cmd = bare_command(a.dataset, epochs, a.data_dir, name.removeprefix("bare-"), a.bare_iters,
                            a.bare_device)
    wall, cpu, out = timed(cmd, env, Path(a.checkout.get(name, REPO)))
    info = json.loads(timer.read_text() if name in fits else out.strip().splitlines()[-1])
    return wall, cpu, info["ms_per_step"]


def concurrent(n: int, epochs: int, a: argparse.Namespace, args: list[str], tmp: str) -> float:
    """Wall seconds of ``n`` copies of a fit started at once, until the last ends; each gets its share of the cores
    (``OMP_NUM_THREADS``, unless ``--threads`` set it): OpenMP threads beyond the cores spin-wait on each other."""
    env = child_env(a.threads or max(1, (os.cpu_count() or 1) // n))
    cmds = [fit_command(a.config, epochs, a.data_dir, f"{tmp}/conc{n}_{i}", Path(tmp) / f"conc{n}_{i}.json", args)
            for i in range(n)]
    # stderr to files, not pipes: waiting on one process while another fills its pipe would stall that one.
    logs = [Path(tmp) / f"conc{n}_{i}.stderr" for i in range(n)]
    start = time.perf_counter()
    procs = []
    for cmd, log in zip(cmds, logs):
        with open(log, "w") as err:
            procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err))
    for proc in procs:
        proc.wait()
    wall = time.perf_counter() - start
    for proc, log in zip(procs, logs):
        if proc.returncode != 0:
            raise RuntimeError(f"a concurrent fit failed (rc {proc.returncode}):\n{log.read_text()[-3000:]}")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=["mnist", "cifar10"], default="mnist")
    p.add_argument("--config", default=None,
                   help="the fit's config (default: configs/<dataset>_ot.yaml); a variant's own --config would reset "
                        "the epochs, so a config to time goes here")
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--epochs", type=int, nargs=2, default=[1, 3], metavar=("E1", "E2"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of every process (default: unset)")
    p.add_argument("--variant", nargs=2, action="append", metavar=("NAME", "ARGS"),
                   help="a fit and its overrides (one shell-quoted string); default: solve '' ")
    p.add_argument("--checkout", nargs=2, action="append", default=[], metavar=("NAME", "PATH"),
                   help="variant NAME runs in the checkout at PATH (e.g. a git worktree at an older commit)")
    p.add_argument("--bare", nargs="*", choices=["solve", "fixed"], default=[], help="bare loops with these solvers")
    p.add_argument("--bare-iters", type=int, default=10, help="the bare loop's --iters with --bare fixed")
    p.add_argument("--bare-device", default="cpu", help="the bare loop's --device (cuda beside a fit on the GPU)")
    p.add_argument("--concurrent", type=int, nargs="*", default=[], help="copies of the first variant run at once")
    a, common = p.parse_known_args()
    a.data_dir = str(Path(a.data_dir).resolve())
    a.config = a.config or f"configs/{a.dataset}_ot.yaml"
    a.checkout = {name: Path(path).resolve() for name, path in a.checkout}
    (e1, e2), env = a.epochs, child_env(a.threads)
    fits = {name: [*common, *shlex.split(extra)] for name, extra in (a.variant or [("solve", "")])}
    names = [*fits, *(f"bare-{s}" for s in a.bare)]
    print(f"{a.config}, epochs {e1} and {e2}, {a.rounds} round(s), OMP_NUM_THREADS={env.get('OMP_NUM_THREADS')}, "
          f"common overrides {common}")
    walls = {(n, e): [] for n in names for e in (e1, e2)}
    cpus = {(n, e): [] for n in names for e in (e1, e2)}
    steps: dict[str, list[float]] = {n: [] for n in names}
    failed: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for n, e in rotated([(n, e) for n in names for e in (e1, e2)], r):
                if n in failed:
                    continue
                try:
                    wall, cpu, ms = run_once(n, e, a, fits, tmp, f"{n}_{e}_{r}", env)
                except RuntimeError as err:  # one broken variant leaves the others' figures (a GPU lease is short)
                    print(f"  {n} failed, left out:\n{err}", flush=True)
                    failed.add(n)
                    continue
                walls[n, e].append(wall)
                cpus[n, e].append(cpu)
                steps[n].append(ms)
                print(f"  round {r} {n:>14} {e:3d} epochs: wall {wall:7.1f} s, cpu {cpu:7.1f} s, {ms:6.2f} ms a step",
                      flush=True)
        names = [n for n in names if n not in failed]
        marginal = {n: [(b - a_) / (e2 - e1) for a_, b in zip(walls[n, e1], walls[n, e2])] for n in names}
        cpu_marginal = {n: [(b - a_) / (e2 - e1) for a_, b in zip(cpus[n, e1], cpus[n, e2])] for n in names}
        fixed = {n: [w - e1 * m for w, m in zip(walls[n, e1], marginal[n])] for n in names}
        bare = next((n for n in names if n.startswith("bare-")), None)
        rows = []
        for n in names:
            m, f = median(marginal[n]), median(fixed[n])
            ref = f"bare-{n}" if f"bare-{n}" in names else bare
            over = ([ref, f"{median([x / y for x, y in zip(marginal[n], marginal[ref])]):.2f}x",
                     f"{median([x / y for x, y in zip(cpu_marginal[n], cpu_marginal[ref])]):.2f}x"] if bare else [])
            rows.append([n, f"{m:.2f}", f"{min(marginal[n]):.2f}-{max(marginal[n]):.2f}", f"{f:.1f}",
                         f"{median(steps[n]):.2f}", f"{(f + 200 * m) / 60:.1f}", f"{median(cpu_marginal[n]):.2f}",
                         *over])
        print(f"\nmedians over {a.rounds} round(s):")
        table(["variant", "s/epoch", "range", "fixed s", "ms/step", "200 ep min", "cpu s/epoch",
               *(["over", "s/epoch /", "cpu /"] if bare else [])], rows)
        if a.concurrent and names and names[0] in fits:
            first, f = names[0], median(fixed[names[0]])
            print(f"\n{first}: N copies at once, {e2} epochs each; 200-epoch projection: each run's time beyond "
                  f"the single run's fixed cost ({f:.1f} s) scaled by 200/{e2}")
            rows = []
            for n in a.concurrent:
                try:
                    # N = 1 is the single run measured above: not run again (a GPU lease is short)
                    wall = median(walls[first, e2]) if n == 1 else concurrent(n, e2, a, fits[first], tmp)
                except RuntimeError as err:
                    print(f"  N={n} failed:\n{err}", flush=True)
                    failed.add(f"{n} concurrent")
                    break
                long = f + (wall - f) * 200 / e2
                projected = ([f"{long / 60:.1f}", f"{n * 3600 / long:.1f}", f"{50 * long / (n * 3600):.2f}"]
                             if wall > f else ["-"] * 3)  # runs shorter than the fixed cost: nothing to scale
                rows.append([str(n), f"{wall:.1f}", f"{n * 3600 / wall:.1f}", *projected])
                print(f"  N={n}: {wall:.1f} s", flush=True)
            table(["N", "wall s", f"{e2}-ep runs/h", "200-ep run min", "200-ep runs/h", "h for 50x200"], rows)
    if failed:
        sys.exit(f"failed: {', '.join(sorted(failed))}")


if __name__ == "__main__":
    main()
