"""Atomic checkpoint writes, checked by killing a real writer process at random moments."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch


REPO = Path(__file__).resolve().parents[1]

# Writes checkpoints of ~32 MB back to back; each one's payload is filled with its step number, so
# a reader can tell a whole checkpoint from a torn one (or one mixing two writes).
WRITER = """
import sys, torch
from lit_otclust.checkpointing import AtomicCheckpointIO
io = AtomicCheckpointIO()
step = 0
while True:
    ckpt = {"step": step, "payload": torch.full((8_000_000,), float(step))}
    if sys.argv[2] == "atomic":
        io.save_checkpoint(ckpt, sys.argv[1])
    else:  # the obvious code, streaming into the target: the reference that tears
        torch.save(ckpt, sys.argv[1])
    step += 1
"""


def kill_while_writing(path: Path, writer: str, trials: int, seed: int = 0, until_torn: bool = False) -> list[str]:
    """SIGKILL the writer at random moments after its first checkpoint; the load error of each trial ('' if none).

    With ``until_torn``, stop at the first torn checkpoint.
    """
    rng = random.Random(seed)
    errors: list[str] = []
    for _ in range(trials):
        if until_torn and any(errors):
            break
        path.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), writer], cwd=REPO)
        try:
            while not path.exists():
                assert proc.poll() is None, "the writer died before its first checkpoint"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.5))
        finally:
            proc.kill()
            proc.wait()
        try:
            ckpt = torch.load(path, weights_only=False)
            errors.append("" if bool((ckpt["payload"] == ckpt["step"]).all()) else "payload of another step")
        except Exception as exc:  # a torn file fails to unpickle in several ways
            errors.append(f"{type(exc).__name__}: {exc}")
    return errors


@pytest.mark.slow
def test_a_kill_during_a_checkpoint_write_leaves_a_readable_checkpoint(tmp_path):
    errors = kill_while_writing(tmp_path / "last.ckpt", "atomic", trials=6)
    assert errors == [""] * len(errors), errors
    # The same kills tear a checkpoint that torch.save streams into place: the test can tell.
    # (About half the kills tear it; 20 trials all missing would happen once in a million runs.)
    assert any(kill_while_writing(tmp_path / "direct.ckpt", "direct", trials=20, until_torn=True))
