"""Pre-emption under DDP: SIGTERM at random moments of a real 2-process gloo run never deadlocks, always saves, and
the run resumed again and again ends bit for bit where the uninterrupted run ends."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from _runs import REPO, SMOKE
from _wandb_log import assert_one_wandb_run_with_the_whole_curve

# 60 epochs of 10 steps a rank (2,000 samples, batches of 100), one of them pre-training: enough training for 20 stops
# at random moments up to 1.5 s into a segment's training (each stop costs an epoch or two of it) and an end to compare.
# The loggers are the CLI's own, as users run: CSV in root/csv and W&B, offline here.
RUN = ["--config", SMOKE, "--data.init_args.subset", "2000", "--trainer.max_epochs", "60",
       "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
       "--trainer.log_every_n_steps", "1"]
EXIT_BOUND_S = 60.0  # from the last signal to both ranks gone; measured ~1-5 s (a batch, or an evaluation and a batch)


def _command(data_dir: Path, root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lit_otclust", "fit", *RUN, "--data.data_dir", str(data_dir),
            "--trainer.default_root_dir", str(root), *extra]


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _is_wandb_service(pid: int) -> bool:
    try:
        return b"wandb-core" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _training_started(root: Path, versions_before: int) -> bool:
    """The newest CSV log of this segment has a row: its first training batch is done (log_every_n_steps=1)."""
    versions = sorted((root / "csv").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    return len(versions) > versions_before and (versions[-1] / "metrics.csv").exists()


def _state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=False, map_location="cpu")["state_dict"]


@pytest.mark.slow
@pytest.mark.distributed
def test_sigterm_at_random_moments_never_deadlocks_and_resumes_exactly(data_dir, tmp_path):
    """20 segments of one 2-rank DDP run, each stopped by SIGTERM at a random moment of its training (uniform over
    0-1.5 s after its first batch: inside the distributed Sinkhorn's collectives, backward, an epoch's evaluation,
    its checkpoint save), delivered in turn to both ranks together, to rank 0 first and to rank 1 first, the other
    50-400 ms later. Each segment must exit 143 with both processes gone within EXIT_BOUND_S of the last signal and
    leave a readable last.ckpt further along than the one before; the next segment resumes from it. The run then
    finishes, and its weights, centers and Sinkhorn potentials equal the uninterrupted run's, bit for bit."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    reference = tmp_path / "reference"
    proc = subprocess.run(_command(data_dir, reference), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    root, rng, last_step, exits = tmp_path / "cut", random.Random(0), -1, []
    modes = ("together", "rank0_first", "rank1_first")
    for trial in range(20):
        versions = len(list((root / "csv").glob("version_*")))
        extra = ("--ckpt_path", "last") if (root / "checkpoints" / "last.ckpt").exists() else ()
        log = open(tmp_path / f"segment{trial}.log", "w")
        rank0 = subprocess.Popen(_command(data_dir, root, *extra), cwd=REPO, env=env, stdout=log,
                                 stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while not _training_started(root, versions):
            assert rank0.poll() is None, f"segment {trial} ended before training: {rank0.returncode}"
            assert time.monotonic() < deadline, f"segment {trial} did not start training"
            time.sleep(0.05)
        rank1 = [pid for pid in _children(rank0.pid) if not _is_wandb_service(pid)]
        assert len(rank1) == 1, f"expected one child process (rank 1) beside W&B's service, found {rank1}"
        time.sleep(rng.uniform(0.0, 1.5))
        mode, lag = modes[trial % 3], rng.uniform(0.05, 0.4)
        first, second = {"together": (None, None), "rank0_first": (rank0.pid, rank1[0]),
                         "rank1_first": (rank1[0], rank0.pid)}[mode]
        if first is None:  # as SLURM and Kubernetes stop a job: every process, W&B's service (rank 0's child) too
            for pid in (rank0.pid, *_children(rank0.pid)):
                os.kill(pid, signal.SIGTERM)
        else:
            os.kill(first, signal.SIGTERM)
            time.sleep(lag)
            if _alive(second):
                os.kill(second, signal.SIGTERM)
        sent = time.monotonic()
        try:
            code = rank0.wait(timeout=EXIT_BOUND_S)
        except subprocess.TimeoutExpired:
            for pid in (rank0.pid, *rank1):
                os.kill(pid, signal.SIGKILL)
            pytest.fail(f"segment {trial} ({mode}, lag {lag:.2f} s): no exit {EXIT_BOUND_S} s after SIGTERM "
                        f"(a deadlock); log: {tmp_path / f'segment{trial}.log'}")
        while _alive(rank1[0]):
            assert time.monotonic() - sent < EXIT_BOUND_S, f"segment {trial}: rank 1 still alive"
            time.sleep(0.05)
        exits.append(time.monotonic() - sent)
        log.close()
        tail = (tmp_path / f"segment{trial}.log").read_text()[-3000:]
        assert code == 143, f"segment {trial} ({mode}): exit {code}\n{tail}"
        step = torch.load(root / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")["global_step"]
        assert step > last_step, f"segment {trial}: last.ckpt at step {step}, not past {last_step}"
        last_step = step
    proc = subprocess.run(_command(data_dir, root, "--ckpt_path", "last"), cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"exit after the last signal: max {max(exits):.2f} s, median {sorted(exits)[len(exits) // 2]:.2f} s")
    ref, got = _state(reference / "checkpoints" / "last.ckpt"), _state(root / "checkpoints" / "last.ckpt")
    assert ref.keys() == got.keys()
    for name, value in ref.items():
        assert torch.equal(got[name], value), f"{name}: max difference {(got[name].double() - value.double()).abs().max()}"
    assert_one_wandb_run_with_the_whole_curve(root)


def _wandb_service(pid: int, timeout: float = 120) -> int:
    """The W&B service process that the fit ``pid`` started (its child)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [child for child in _children(pid) if _is_wandb_service(child)]
        if found:
            return found[0]
        time.sleep(0.1)
    pytest.fail(f"no W&B service process under {pid}")


@pytest.mark.slow
def test_sigterm_to_every_process_with_wandb_on_saves_exits_143_and_resumes_as_one_wandb_run(data_dir, tmp_path):
    """A pre-emption as SLURM sends it: SIGTERM to the fit and to W&B's service together, at a random moment after
    an attempt's first log; W&B's service exits on the signal, losing what it had not written. The fit must not fail
    on the closed socket (it did, with exit 1 and no requeue) but save and exit 143 every time. One stop signals the
    fit alone, so that W&B's file of that attempt is complete. Resumed to the end, the offline W&B runs are one run
    (one id) that holds every epoch's val/acc as the CSV log does, once: what W&B lost is sent again, what it kept
    is not. The attempts start from a process whose W&B service is running (as from a notebook or a test session
    that used W&B): each must still own its own service, or the run never finishes there and the next attempt finds
    its id "in use"."""
    import wandb

    wandb.setup()  # this process's service, whose token (WANDB_SERVICE) every attempt inherits
    assert os.environ.get("WANDB_SERVICE")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    root, rng = tmp_path / "run", random.Random(3)
    command = [sys.executable, "-m", "lit_otclust", "fit", "--config", SMOKE, "--data.data_dir", str(data_dir),
               "--trainer.max_epochs", "12", "--trainer.default_root_dir", str(root)]
    for trial, everyone in enumerate((True, False, True, True)):
        extra = ["--ckpt_path", "last"] if (root / "checkpoints" / "last.ckpt").exists() else []
        log = tmp_path / f"attempt{trial}.log"
        with open(log, "w") as out:
            fit = subprocess.Popen(command + extra, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
            service = _wandb_service(fit.pid)
            versions = sorted((root / "csv").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
            deadline = time.monotonic() + 300
            while not (versions and (root / "csv" / versions[-1].name / "metrics.csv").exists()
                       and len(list((root / "csv").glob("version_*"))) > trial):
                assert fit.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                versions = sorted((root / "csv").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.0))
            for pid in (fit.pid, service) if everyone else (fit.pid,):
                os.kill(pid, signal.SIGTERM)
            code = fit.wait(timeout=EXIT_BOUND_S)
        assert code == 143, f"attempt {trial}: exit {code}\n{log.read_text()[-3000:]}"
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    proc = subprocess.run(command + ["--ckpt_path", "last"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_one_wandb_run_with_the_whole_curve(root)
