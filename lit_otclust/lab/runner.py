"""The runner of studies (:mod:`lit_otclust.lab.studies`): each run's fit in a subprocess, locked against a second runner,
stopped by SIGTERM as a fit is (the fits in flight save ``last.ckpt``, none starts after), its record written from
the CSV log, logged to W&B where asked; locally, ``jobs`` at a time or per GPU, or as a SLURM job array whose
pre-empted task requeues itself."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from queue import Queue
from typing import Iterator

from lit_otclust.lab.studies import CURVE_KEYS, Run, Study
from lit_otclust.runfiles import csv_logs, read_confusions, read_curves

REPO = Path(__file__).resolve().parents[1]  # for the commit of the code only: configs come from the study file
SIGTERM_EXIT = 143  # what a fit stopped by SIGTERM exits with, after saving last.ckpt (lit_otclust.cli)


def _short(text: str, limit: int = 64) -> str:
    """``text`` within W&B's 64 characters for a tag: a longer one keeps its start and a hash of the whole."""
    if len(text) <= limit:
        return text
    return text[:limit - 9] + "~" + hashlib.sha1(text.encode()).hexdigest()[:8]


def wandb_args(run: Run, study_file: Path | None) -> list[str]:
    """The fit's W&B settings in a study: the study's name as the group (W&B then draws a column's mean and spread
    by epoch), the column (config and grid point) as the job type, the seed and each grid setting as tags, and the
    study file, named in the run's config (its settings there are the effective ones, not the file's `set`)."""
    group = study_file.stem if study_file is not None else run.out.name
    tags = [f"seed={run.seed}", *run.tags]
    args = ["--wandb.group", group, "--wandb.job_type", _short(run.column),
            "--wandb.tags", json.dumps([_short(tag) for tag in tags])]
    return args + (["--wandb.study", str(study_file)] if study_file is not None else [])


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere): a rerun on another model
    differs from the first epoch on, as floating-point reductions order differently."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_name(gpu: str | None) -> str | None:
    """The name of the GPU a fit ran on: ``gpu``, one of :func:`visible_gpus`, else the first visible; None where
    there is none."""
    import torch  # here: the dry run and the SLURM launcher need no torch

    if not torch.cuda.is_available():
        return None
    ids = visible_gpus()
    return torch.cuda.get_device_name(ids.index(gpu) if gpu in ids else 0)


def _commit() -> str | None:
    """The code's git commit (with ``+dirty`` if the code or the configs have changes), so a record names what
    ran. Results written beside the runs (a study's tables) do not make the code dirty."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "lit_otclust", "configs"],
                               cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def _attempts_seconds(root: Path, now: float, done: bool) -> float:
    """Wall seconds of a run over all its attempts, kept in ``root/attempts.json`` as [start, end] pairs.

    Called with ``done=False`` when an attempt starts and ``done=True`` when it ends. An attempt killed on
    the way (the session stopped) never wrote its end: its useful work ended at its last checkpoint, which
    the next attempt resumes from, so ``last.ckpt``'s modification time closes it (the epochs after it are
    redone and counted once). Returns the sum so far (the attempts before this one when starting)."""
    path = root / "attempts.json"
    attempts = json.loads(path.read_text()) if path.exists() else []
    last_ckpt = root / "checkpoints" / "last.ckpt"
    if attempts and attempts[-1][1] is None and not done:
        attempts[-1][1] = last_ckpt.stat().st_mtime if last_ckpt.exists() else attempts[-1][0]
    if done:
        attempts[-1][1] = now
    else:
        attempts.append([now, None])
    path.write_text(json.dumps(attempts) + "\n")
    return sum(end - start for start, end in attempts if end is not None)


# The fits in flight, so that a SIGTERM to the runner reaches them (they save last.ckpt and exit 143) and no
# other run starts after it.
_live: set[subprocess.Popen] = set()
_stopping = threading.Event()


@contextmanager
def _forward_sigterm() -> Iterator[None]:
    """SIGTERM to this process stops it the way it stops a fit: the fits in flight get it, and none starts after."""
    def forward(signum: int, frame: object) -> None:
        _stopping.set()
        for proc in list(_live):
            proc.send_signal(signal.SIGTERM)

    _stopping.clear()
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set a handler
        yield
        return
    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def execute(run: Run, study_file: Path | None, threads: int = 1, wandb: bool = False,
            gpu: str | None = None, pretrain_cache: Path | None = None) -> tuple[int, str]:
    """Fit ``run`` unless its record exists or another runner holds it, then write its record. Returns the exit
    status and a line saying what happened. ``wandb``: also log to W&B (:func:`wandb_args`), as ``fit`` does:
    offline where there are no credentials. ``pretrain_cache``: the fit's ``--pretrain_cache``
    (:mod:`lit_otclust.pretrain_cache`), how it runs, not what it computes, like the W&B flags."""
    if run.done:
        return 0, f"skip {run.name}"
    if _stopping.is_set():
        return SIGTERM_EXIT, f"not started {run.name}: stopping"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "WANDB_SILENT": "true"}
    if not wandb:
        env["WANDB_MODE"] = "disabled"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    run.root.mkdir(parents=True, exist_ok=True)
    # Two runners of one study (two shells, a local run beside a SLURM array) would both pick a run without a record
    # and write one folder; the first to lock it runs it, the other skips it. The lock goes with the process.
    with open(run.root / "running.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0, f"skip {run.name}: running in another process"
        if run.done:  # finished by the process that held the lock
            return 0, f"skip {run.name}"
        return _fit_and_record(run, study_file, env, threads, wandb, gpu, pretrain_cache)


def _fit_and_record(run: Run, study_file: Path | None, env: dict[str, str], threads: int, wandb: bool = False,
                    gpu: str | None = None, pretrain_cache: Path | None = None) -> tuple[int, str]:
    command = run.command() + (wandb_args(run, study_file) if wandb else [])
    command += ["--pretrain_cache", str(pretrain_cache)] if pretrain_cache is not None else []
    _attempts_seconds(run.root, time.time(), done=False)
    with open(run.root / "stdout.log", "a") as log:
        proc = subprocess.Popen([sys.executable, *command[1:]], env=env, stdout=log, stderr=subprocess.STDOUT)
        _live.add(proc)
        try:
            status = proc.wait()
        finally:
            _live.discard(proc)
    if status != 0:  # the attempt stays open: the next one closes it at the last checkpoint (_attempts_seconds)
        why = "stopped by SIGTERM, last.ckpt saved" if status == SIGTERM_EXIT else "failed"
        return status, f"{why}: {run.name} (exit {status}; see {run.root / 'stdout.log'})"
    curves: dict[int, dict[str, float]] = {}
    for log_file in csv_logs(run.root / "csv"):  # later versions win
        curves.update(read_curves(log_file, CURVE_KEYS))
    dataset, _, method = run.name.split("__")[0].partition("_")
    record = {"name": run.name, "config": Path(run.config).stem, "dataset": dataset, "method": method,
              "seed": run.seed, "grid": run.grid_settings, "settings": run.settings,
              "seconds": round(_attempts_seconds(run.root, time.time(), done=True), 1),
              "final": curves[max(curves)] if curves else {}, "curves": curves, "command": shlex.join(command),
              "commit": _commit(), "omp_num_threads": threads, "torch": metadata.version("torch"),
              "cpu": cpu_model(), "gpu": gpu_name(gpu),
              "study": None if study_file is None else str(study_file)}
    from lit_otclust.pretrain_cache import STARTED_FROM  # here: the dry run and the SLURM launcher need no torch

    started = run.root / STARTED_FROM
    if started.is_file():  # its pre-training was another run's (--pretrain_cache): `seconds` leaves it out
        record["pretrained"] = json.loads(started.read_text())
    confusion = read_confusions(run.root / "figures")
    if confusion:  # clusters x classes every `figures.every_n_epochs` epochs: which classes merge or split, and when
        record["confusion"] = confusion
    run.record.write_text(json.dumps(record, indent=1) + "\n")
    return 0, f"done {run.name}: val/acc {record['final'].get('val/acc', float('nan')):.4f} in {record['seconds']:.0f}s"


def offline_wandb_runs(study: Study) -> list[Path]:
    """The offline W&B runs of a study's fits, one folder an attempt; a resumed fit's attempts share one run id, which
    ``wandb sync`` joins into one run."""
    return sorted(path for run in study.runs for path in (run.root / "wandb").glob("offline-run-*") if path.is_dir())


def sync_wandb(study: Study, dry_run: bool = False) -> int:
    """Upload a study's offline W&B runs with ``wandb sync`` (with ``dry_run``, print its command only)."""
    runs = offline_wandb_runs(study)
    if not runs:
        print(f"no offline W&B runs under {study.out}/**/runs/*/wandb/ (the study ran with --no-wandb, or not yet)",
              file=sys.stderr)
        return 1
    script = Path(sys.executable).with_name("wandb")
    command = [str(script) if script.exists() else "wandb", "sync", *map(str, runs)]
    print(f"{len(runs)} offline W&B runs of {study.path or study.out}", file=sys.stderr)
    if dry_run:
        print(shlex.join(command))
        return 0
    return subprocess.run(command).returncode


def visible_gpus() -> list[str]:
    """The GPUs this process sees, as the ids a child's CUDA_VISIBLE_DEVICES takes (this one's own list, if set)."""
    import torch  # here: the dry run and the SLURM launcher need no torch

    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return ([d.strip() for d in listed.split(",")] if listed else [str(i) for i in range(count)])[:count]


def shared_pretraining(study: Study) -> Path:
    """The study's cache of pre-trainings (:mod:`lit_otclust.pretrain_cache`): the (p) runs of one seed, whatever
    their loss, proportions or grid point after the switch, pre-train once."""
    return study.out / "runs" / "pretrained"


def run_local(study: Study, jobs: int = 1, threads: int = 1, wandb: bool = False,
              gpus: list[str] | None = None, share_pretraining: bool = True) -> int:
    """Run the study's runs that have no record, ``jobs`` at a time, or ``jobs`` per GPU where GPUs are visible
    (``gpus``: their ids; None: :func:`visible_gpus`), sharing pre-trainings (:func:`shared_pretraining`) unless
    ``share_pretraining`` is false. Returns 0, 1 if a run failed, or 143 if stopped by SIGTERM."""
    gpus = visible_gpus() if gpus is None else gpus
    slots: Queue[str | None] = Queue()
    for gpu in gpus or [None]:
        for _ in range(jobs):
            slots.put(gpu)
    todo = [run for run in study.runs if not run.done]
    cache = shared_pretraining(study) if share_pretraining else None
    where = f" on GPUs {','.join(gpus)}, {jobs} a GPU" if gpus else f", {jobs} at a time"
    print(f"{len(study.runs)} runs in {study.out}: {len(study.runs) - len(todo)} done, {len(todo)} to run{where}",
          flush=True)

    def task(run: Run) -> tuple[int, str]:
        gpu = slots.get()
        try:
            return execute(run, study.path, threads, wandb, gpu, cache)
        finally:
            slots.put(gpu)

    statuses = []
    with _forward_sigterm(), ThreadPoolExecutor(max_workers=slots.qsize()) as pool:
        for status, line in pool.map(task, todo):
            statuses.append(status)
            print(line, flush=True)
    if _stopping.is_set():
        return SIGTERM_EXIT
    return 1 if any(statuses) else 0


def run_named(study: Study, label: str, threads: int = 1, wandb: bool = False, share_pretraining: bool = True) -> int:
    """Run the one run ``label`` names (:meth:`Study.label`), as a SLURM array task does; returns the fit's status."""
    cache = shared_pretraining(study) if share_pretraining else None
    with _forward_sigterm():
        status, line = execute(study.find(label), study.path, threads, wandb, pretrain_cache=cache)
    print(line, flush=True)
    return status


def slurm_script(study: Study, runs: list[Run], threads: int = 1, jobs: int | None = None,
                 options: list[str] = (), share_pretraining: bool = True) -> str:
    """A SLURM job array of ``runs``, one a task. A task stopped by SIGTERM (pre-emption, or ``--signal`` before the
    time limit) lets its fit save ``last.ckpt``, exits 143 and requeues itself; the requeued task resumes the run.
    ``jobs``: at most that many tasks at a time; ``options``: more ``#SBATCH`` options (``--gpus-per-task=1``)."""
    if study.path is None:
        raise ValueError("a SLURM array runs a study file: this study has none")
    logs = study.out / "runs" / "slurm"
    run_one = shlex.join([sys.executable, "-m", "lit_otclust.experiments", "run", str(study.path), "--threads",
                          str(threads), *([] if share_pretraining else ["--no-share-pretraining"]), "--run"])
    lines = ["#!/usr/bin/env bash",
             f"# {len(runs)} runs of {study.path} without a record at submission, one per array task; written by",
             "# `python -m lit_otclust.experiments run STUDY --launcher slurm`. SIGTERM (pre-emption, or 120 s before",
             "# the time limit): the fit saves last.ckpt and exits 143, and the task requeues itself to resume it.",
             f"#SBATCH --job-name={study.path.stem}",
             f"#SBATCH --array=0-{len(runs) - 1}" + (f"%{jobs}" if jobs else ""),
             "#SBATCH --ntasks=1",
             f"#SBATCH --cpus-per-task={threads}",
             "#SBATCH --signal=TERM@120",
             "#SBATCH --requeue",
             "#SBATCH --open-mode=append",
             f"#SBATCH --output={logs.resolve()}/%A_%a.out",
             f"#SBATCH --chdir={Path.cwd()}",
             *[f"#SBATCH {option}" for option in options],
             "set -uo pipefail",
             "RUNS=(",
             *[f"    {shlex.quote(study.label(run))}" for run in runs],
             ")",
             # A trap, not the default action, so that this shell outlives a SIGTERM and can requeue.
             "trap 'echo \"SIGTERM: the run saves last.ckpt and stops\"' TERM",
             f'srun {run_one} "${{RUNS[$SLURM_ARRAY_TASK_ID]}}"',
             "status=$?",
             f"if [ $status -eq {SIGTERM_EXIT} ]; then",
             '    echo "stopped by SIGTERM; requeueing $SLURM_JOB_ID to resume from last.ckpt"',
             '    scontrol requeue "$SLURM_JOB_ID"',
             "fi",
             "exit $status"]
    return "\n".join(lines) + "\n"


def submit_slurm(study: Study, threads: int = 1, jobs: int | None = None, options: list[str] = (),
                 sbatch: str = "sbatch", dry_run: bool = False, share_pretraining: bool = True) -> Path | None:
    """Write the array of the runs without a record to ``<out>/runs/slurm/<study>.sbatch`` and submit it (with
    ``dry_run``, write it only). Returns the script's path, or None when every run has its record."""
    todo = [run for run in study.runs if not run.done]
    if not todo:
        print(f"all {len(study.runs)} runs of {study.path} have their records: nothing submitted", file=sys.stderr)
        return None
    script = study.out / "runs" / "slurm" / f"{study.path.stem}.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)  # SLURM writes the tasks' logs there, and does not create it
    script.write_text(slurm_script(study, todo, threads, jobs, options, share_pretraining))
    if dry_run:
        print(f"{len(todo)} array tasks written to {script}, not submitted", file=sys.stderr)
    else:
        out = subprocess.run([sbatch, str(script)], capture_output=True, text=True, check=True).stdout.strip()
        print(f"{out}: {len(todo)} runs of {study.path} ({script})", file=sys.stderr)
    return script
