"""The cluster path on a real SLURM: scripts/slurm.sbatch as a user submits it, on the one-node cluster that
tests/cluster/slurm_up.sh starts on this machine (as root; skipped with the reason where it cannot)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from _runs import REPO
from _wandb_log import assert_one_wandb_run_with_the_whole_curve

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
UP = REPO / "tests" / "cluster" / "slurm_up.sh"
# 2,000 samples, batches of 100 over 2 ranks: 10 steps an epoch; 1 pre-training epoch, then OT. The loggers are the
# CLI's own, as users run: CSV in ROOT/csv and W&B, offline here (not disabled: W&B's service is one more process
# that a pre-emption's SIGTERM reaches).
FIT = ["configs/smoke.yaml", "--data.init_args.subset", "2000", "--trainer.max_epochs", "8",
       "--trainer.log_every_n_steps", "1"]


@pytest.fixture(scope="module")
def slurm() -> None:
    if os.geteuid() != 0:
        pytest.skip("SLURM tests start a cluster with tests/cluster/slurm_up.sh, which needs root")
    proc = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"no SLURM cluster: {proc.stderr.strip()}")


def _submit(data_dir: Path, root: Path, *sbatch: str, fit: tuple[str, ...] = ()) -> str:
    cmd = ["sbatch", "--parsable", "--ntasks-per-node=2", "--cpus-per-task=1", f"--chdir={REPO}",
           f"--output={root}.out", f"--export=ALL,ROOT={root},WANDB_MODE=offline,WANDB_SILENT=true", *sbatch,
           str(REPO / "scripts" / "slurm.sbatch"), *FIT, *fit, "--data.data_dir", str(data_dir)]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().split(";")[0]


def _state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()
    return out or "GONE"


def _wait(predicate, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


_pending_since: dict[str, float] = {}


def _release(job: str) -> bool:
    """A requeued job waits for a begin time ~2 minutes ahead (SLURM's hold after a requeue): start it 10 s after it
    was first seen waiting, not at once (started within the second of its requeue, slurmd refuses the job: "Job
    credential revoked", and it fails). Returns False, for use in a wait's condition."""
    if _state(job) == "PENDING":
        first = _pending_since.setdefault(job, time.monotonic())
        if time.monotonic() - first > 10:
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True)
            _pending_since.pop(job)
    else:
        _pending_since.pop(job, None)
    return False


def _wait_gone(job: str, root: Path, timeout: float = 900) -> None:
    _wait(lambda: _release(job) or _state(job) == "GONE", f"job {job} to end; its log: {root}.out", timeout)


def _training(root: Path, versions_before: int) -> bool:
    versions = sorted((root / "csv").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    return len(versions) > versions_before and (versions[-1] / "metrics.csv").exists()


def _task_pids(root: Path) -> list[int]:
    """The two ranks' processes of the running job (their command line names this run's root)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd[1:3] == [b"-m", b"lit_otclust"] and str(root).encode() in cmd:  # not srun, not the batch script
                pids.append(int(entry.name))
    return pids


def _final(root: Path) -> dict[str, torch.Tensor]:
    return torch.load(root / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")


def _val_acc(root: Path) -> list[str]:
    rows = []
    for log in sorted((root / "csv").glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1])):
        header, *lines = log.read_text().splitlines()
        col = header.split(",").index("val/acc") if "val/acc" in header.split(",") else None
        rows += [line.split(",")[col] for line in lines if col is not None and line.split(",")[col]]
    return rows


@pytest.fixture(scope="module")
def uninterrupted(slurm, data_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slurm") / "uninterrupted"
    job = _submit(data_dir, root)
    _wait_gone(job, root)
    assert "Trainer.fit` stopped: `max_epochs=8` reached" in Path(f"{root}.out").read_text(), f"see {root}.out"
    return root


def _assert_same_run(root: Path, reference: Path, steps: int = 80) -> None:
    ref, got = _final(reference), _final(root)
    assert got["global_step"] == ref["global_step"] == steps
    for name, value in ref["state_dict"].items():
        assert torch.equal(got["state_dict"][name], value), (
            f"{name}: max difference {(got['state_dict'][name].double() - value.double()).abs().max()}")
    # The final epoch's accuracy as logged (the resumed job's last log holds it): identical strings.
    assert _val_acc(root)[-1] == _val_acc(reference)[-1]


def test_a_job_preempted_three_times_requeues_itself_and_ends_as_the_uninterrupted_job(data_dir, tmp_path,
                                                                                        uninterrupted):
    """SIGTERM at random moments of a 2-task DDP job: by `scancel -s TERM` (both tasks together), then to one task's
    process 50-400 ms before the other's, each way round (by process id). Each time both tasks exit 143 within 60 s, the script
    requeues the job, SLURM restarts it, and it resumes from last.ckpt; the finished job's weights, centers and
    potentials equal the uninterrupted job's bit for bit, and so does its last val/acc."""
    root, rng = tmp_path / "preempted", random.Random(1)
    job = _submit(data_dir, root)
    for trial, mode in enumerate(("scancel", "lower_pid_first", "higher_pid_first")):
        versions = len(list((root / "csv").glob("version_*")))
        _wait(lambda: _release(job) or _training(root, versions), f"job {job} to train (trial {trial})")
        time.sleep(rng.uniform(0.0, 2.0))
        if mode == "scancel":
            subprocess.run(["scancel", "-s", "TERM", job], check=True)
        else:
            pids = sorted(_task_pids(root))
            assert len(pids) == 2, f"expected the 2 ranks' processes, found {pids}"
            order = pids if mode == "lower_pid_first" else pids[::-1]
            os.kill(order[0], signal.SIGTERM)
            time.sleep(rng.uniform(0.05, 0.4))
            os.kill(order[1], signal.SIGTERM)
        sent = time.monotonic()
        _wait(lambda: not _task_pids(root), f"both tasks to exit after SIGTERM (trial {trial})", timeout=60)
        print(f"trial {trial} ({mode}): both tasks gone {time.monotonic() - sent:.1f} s after the signal")
        # srun and the script write their lines after the tasks are gone.
        _wait(lambda: Path(f"{root}.out").read_text().count("requeueing job") == trial + 1,
              f"the job to requeue itself (trial {trial}); its log: {root}.out", timeout=60)
        assert "Exited with exit code 143" in Path(f"{root}.out").read_text()  # srun: the tasks' status
    _wait_gone(job, root)
    log = Path(f"{root}.out").read_text()
    assert log.count("Restoring states from the checkpoint path") == 3 and "max_epochs=8` reached" in log, log[-3000:]
    _assert_same_run(root, uninterrupted)


# 60 epochs (600 steps): room for 20 stops, each after an attempt has trained an epoch or two.
LONG = ("--trainer.max_epochs", "60")


@pytest.fixture(scope="module")
def uninterrupted_long(slurm, data_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slurm") / "uninterrupted_long"
    job = _submit(data_dir, root, fit=LONG)
    _wait_gone(job, root)
    assert "Trainer.fit` stopped: `max_epochs=60` reached" in Path(f"{root}.out").read_text(), f"see {root}.out"
    return root


def _newest_epoch(root: Path) -> str | None:
    """The newest epoch checkpoint's name: it changes when an epoch's evaluation (which logs val/*) has ended."""
    found = sorted(p.name for p in (root / "checkpoints").glob("epoch*.ckpt"))
    return found[-1] if found else None


def test_scancel_of_a_job_logging_to_wandb_requeues_it_every_time_and_it_ends_as_one_run(data_dir, tmp_path,
                                                                                         uninterrupted_long):
    """20 times `scancel -s TERM` of a 2-task DDP job logging to W&B (offline), as users run: SLURM signals every
    process of the job, W&B's service (rank 0's child) included, which exits on it. Half the stops fall at a random
    moment of training, half near an epoch's end (75-100% of an epoch after an epoch's checkpoint), where the
    validation logging meets the closed socket of the service: once a ConnectionResetError that failed the job with
    exit 1 and no requeue. Every stop must exit 143 and requeue; the finished job equals the uninterrupted one bit
    for bit; its offline W&B runs are one run holding every epoch's val/acc once."""
    root, rng, period = tmp_path / "scancel", random.Random(2), None
    job = _submit(data_dir, root, fit=LONG)
    for trial in range(20):
        versions = len(list((root / "csv").glob("version_*")))
        _wait(lambda: _release(job) or _training(root, versions), f"job {job} to train (trial {trial})")
        if trial % 2:  # near an epoch's end: after the next epoch checkpoint, most of an epoch more
            seen = _newest_epoch(root)
            _wait(lambda: _newest_epoch(root) != seen, f"an epoch's end (trial {trial})")
            if period is None:  # an epoch's wall time, from two checkpoints in a row
                start, seen = time.monotonic(), _newest_epoch(root)
                _wait(lambda: _newest_epoch(root) != seen, f"the next epoch's end (trial {trial})")
                period = time.monotonic() - start
            time.sleep(period * rng.uniform(0.75, 1.0))
        else:
            time.sleep(rng.uniform(0.0, 2.0))
        subprocess.run(["scancel", "-s", "TERM", job], check=True)
        _wait(lambda: not _task_pids(root), f"both tasks to exit after SIGTERM (trial {trial})", timeout=60)
        _wait(lambda: Path(f"{root}.out").read_text().count("requeueing job") == trial + 1,
              f"the job to requeue itself (trial {trial}); its log: {root}.out", timeout=60)
    _wait_gone(job, root)
    log = Path(f"{root}.out").read_text()
    assert log.count("Restoring states from the checkpoint path") == 20 and "max_epochs=60` reached" in log, log[-3000:]
    assert log.count("requeueing job") == 20 and "Traceback" not in log, log[-3000:]  # it requeues on exit 143 only
    print(f"20 stops by scancel, an epoch {period:.2f} s: every one exited 143 and requeued")
    _assert_same_run(root, uninterrupted_long, steps=600)
    assert_one_wandb_run_with_the_whole_curve(root)


def test_a_job_killed_without_warning_resumes_from_the_last_checkpoint_when_resubmitted(data_dir, tmp_path,
                                                                                         uninterrupted):
    """SIGKILL on every task (no save, no requeue: the job fails), then the same sbatch again: it resumes from the
    last epoch's checkpoint and ends as the uninterrupted job."""
    root = tmp_path / "killed"
    job = _submit(data_dir, root)
    ckpt = root / "checkpoints" / "last.ckpt"
    _wait(lambda: ckpt.exists() and _final(ckpt.parents[1])["epoch"] >= 2, "the third epoch's checkpoint")
    subprocess.run(["scancel", "-s", "KILL", job], check=True)
    _wait_gone(job, root)
    saved = _final(root)["global_step"]
    assert 0 < saved < 80 and "requeueing" not in Path(f"{root}.out").read_text()
    job = _submit(data_dir, root)
    _wait_gone(job, root)
    log = Path(f"{root}.out").read_text()
    assert f"Restoring states from the checkpoint path at {ckpt}" in log, log[-3000:]
    _assert_same_run(root, uninterrupted)


def test_a_study_runs_as_a_job_array_whose_preempted_task_alone_requeues(data_dir, tmp_path, slurm):
    """`experiments run STUDY --launcher slurm` submits the 2-run smoke study as one array; SIGTERM to one task
    requeues that task only, and it resumes; both records are written; a second `run` submits nothing."""
    study = tmp_path / "smoke.yaml"
    study.write_text(f"out: {tmp_path / 'out'}\nseeds: [0, 1]\nconfigs: [{REPO / 'configs' / 'smoke.yaml'}]\n"
                     f"set:\n  data.data_dir: {data_dir}\n  trainer.max_epochs: 8\n")
    run = ["python", "-m", "lit_otclust.experiments", "run", str(study), "--launcher", "slurm"]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}  # the study's fits log to W&B, as users run
    out = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stderr
    array = out.split("Submitted batch job ")[1].split(":")[0].split()[0]
    first = tmp_path / "out" / "runs" / "smoke__seed=0" / "checkpoints" / "last.ckpt"
    _wait(lambda: first.exists(), "the first task's first checkpoint")
    subprocess.run(["scancel", "-s", "TERM", f"{array}_0"], check=True)
    logs = tmp_path / "out" / "runs" / "slurm"

    def task_log(i: int) -> str:
        found = list(logs.glob(f"{array}_{i}.out"))
        return found[0].read_text() if found else ""

    _wait(lambda: "requeueing" in task_log(0), "task 0 to requeue itself")

    def finished() -> bool:
        listed = subprocess.run(["squeue", "-h", "-r", "-j", array, "-o", "%i %T"], capture_output=True,
                                text=True).stdout.split()
        for job in listed[::2]:
            _release(job)
        return not listed

    _wait(finished, f"array {array} to end")
    records = sorted(p.name for p in (tmp_path / "out").glob("*.json"))
    assert records == ["smoke__seed=0.json", "smoke__seed=1.json"], (records, task_log(0)[-2000:], task_log(1)[-2000:])
    assert task_log(0).count("requeueing") == 1 and "requeueing" not in task_log(1)
    assert "Restoring states from the checkpoint path" in (tmp_path / "out" / "runs" / "smoke__seed=0" /
                                                           "stdout.log").read_text()
    assert_one_wandb_run_with_the_whole_curve(tmp_path / "out" / "runs" / "smoke__seed=0")
    again = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stderr
    assert "nothing submitted" in again
