"""Atomic checkpoint writes, checked by killing a real writer process at random moments."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_otclust.checkpointing import LinkedLastCheckpoint

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


class _Tiny(L.LightningModule):
    """A linear model on fixed random data; logs ``rising`` (grows every epoch) for a monitor that never improves."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        self.log("rising", float(self.current_epoch), on_epoch=True, on_step=False)
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=8)


def _fit(root: Path, checkpoint: ModelCheckpoint) -> None:
    torch.manual_seed(0)
    L.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
              default_root_dir=root, callbacks=[checkpoint]).fit(_Tiny())


def test_linked_last_checkpoint_is_one_write_and_equals_a_saved_last(tmp_path: Path) -> None:
    """last.ckpt is a hard link to the epoch's checkpoint (same file, not a symlink), and holds what Lightning's
    save_last=True writes as a second file: the same weights, optimizer state and step."""
    names = {"filename": "e{epoch}", "auto_insert_metric_name": False}
    _fit(tmp_path / "link", LinkedLastCheckpoint(dirpath=tmp_path / "link", **names))
    _fit(tmp_path / "save", ModelCheckpoint(dirpath=tmp_path / "save", save_last=True, **names))
    link, epoch = tmp_path / "link" / "last.ckpt", tmp_path / "link" / "e2.ckpt"
    assert sorted(p.name for p in (tmp_path / "link").iterdir()) == ["e2.ckpt", "last.ckpt"]  # no temporary left
    assert not link.is_symlink() and link.samefile(epoch)
    ours, reference = (torch.load(p, weights_only=False) for p in (link, tmp_path / "save" / "last.ckpt"))
    assert ours["global_step"] == reference["global_step"] == 12
    for key in ("state_dict", "optimizer_states"):
        assert str(ours[key]) == str(reference[key])


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names the synced file through /proc (Linux)")
def test_linked_last_checkpoint_copies_where_hard_links_fail(tmp_path: Path, monkeypatch) -> None:
    """A file system without hard links: last.ckpt is a copy of the epoch's checkpoint, a file of its own, synced to
    disk before it is renamed into place, with no temporary left."""
    def no_link(src, dst):
        raise OSError("hard links not supported")

    synced: list[str] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "link", no_link)
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), fsync(fd)))
    _fit(tmp_path, LinkedLastCheckpoint(dirpath=tmp_path, filename="e{epoch}", auto_insert_metric_name=False))
    last, epoch = tmp_path / "last.ckpt", tmp_path / "e2.ckpt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e2.ckpt", "last.ckpt"]
    assert not last.samefile(epoch) and last.read_bytes() == epoch.read_bytes()
    assert any(".last.ckpt.link-" in path for path in synced)


def test_linked_last_checkpoint_never_links_an_older_step(tmp_path: Path) -> None:
    # A monitored metric that never improves: the top-k file stays epoch 0's; last.ckpt must still be the last step
    # (Lightning's save_last="link" would point it at epoch 0's file).
    checkpoint = LinkedLastCheckpoint(dirpath=tmp_path, filename="e{epoch}", auto_insert_metric_name=False,
                                      monitor="rising", mode="min")
    _fit(tmp_path, checkpoint)
    last = tmp_path / "last.ckpt"
    assert torch.load(tmp_path / "e0.ckpt", weights_only=False)["global_step"] == 4
    assert torch.load(last, weights_only=False)["global_step"] == 12 and not last.samefile(tmp_path / "e0.ckpt")


def test_a_run_checkpointed_by_model_checkpoint_resumes_under_the_linked_one(tmp_path: Path) -> None:
    # Runs written before LinkedLastCheckpoint (the CLI's ModelCheckpoint(save_last=True)) resume with its state:
    # the old epoch's file is removed as usual and no last-v1.ckpt appears beside last.ckpt.
    def trainer(epochs: int, checkpoint: ModelCheckpoint) -> L.Trainer:
        return L.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, callbacks=[checkpoint])

    old = ModelCheckpoint(dirpath=tmp_path, filename="e{epoch}", auto_insert_metric_name=False, save_last=True)
    trainer(2, old).fit(_Tiny())
    new = LinkedLastCheckpoint(dirpath=tmp_path, filename="e{epoch}", auto_insert_metric_name=False)
    assert new.state_key == old.state_key
    trainer(3, new).fit(_Tiny(), ckpt_path=tmp_path / "last.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e2.ckpt", "last.ckpt"]
    assert (tmp_path / "last.ckpt").samefile(tmp_path / "e2.ckpt")
