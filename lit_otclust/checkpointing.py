"""Checkpoints that survive clusters: atomic writes, and a save when the job is told to stop.

- :class:`AtomicCheckpointIO` writes a checkpoint to a temporary file beside its target and
  renames it into place, so a job killed while writing (SIGKILL, node failure) leaves the
  previous ``last.ckpt`` readable instead of a truncated one.
- :class:`LinkedLastCheckpoint` (the CLI's checkpoint callback) makes ``last.ckpt`` a hard link to the epoch's
  checkpoint, renamed into place, instead of a second write of the same state.
- :class:`SignalCheckpoint` saves ``last.ckpt`` when Lightning stops the run on SIGTERM (what
  ``scancel``, Kubernetes and most schedulers send before killing) or Ctrl-C, mid-epoch
  included. With the resumable training loader (:class:`lit_otclust.data.ResumableLoader`)
  ``--ckpt_path last`` then continues with the very next batch.

SLURM's own pre-emption signal (``#SBATCH --signal=SIGUSR1@90``) is handled by Lightning's
SLURM environment: it saves ``hpc_ckpt_<n>.ckpt`` in ``default_root_dir``, requeues the job, and
the requeued job resumes from it by itself (``scripts/slurm_*.sbatch``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException


@contextmanager
def _staged(path: Path, tag: str) -> Iterator[Path]:
    """A temporary name ``.<name>.<tag>-<pid>`` beside ``path`` for the caller to write, renamed over ``path`` when
    the block succeeds (atomic on POSIX file systems) and removed whatever happens. The caller syncs what it wrote,
    so the bytes are on disk before the name points at them."""
    tmp = path.with_name(f".{path.name}.{tag}-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to ``.<name>.tmp-<pid>`` in the target's folder, fsync, then ``os.replace``.

    The rename is atomic on POSIX file systems, so a reader (or a resumed job) sees either the
    old checkpoint or the new one, never a partial file. Remote paths (``s3://...``) go through
    Lightning's default writer.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with _staged(path, "tmp") as tmp, open(tmp, "wb") as fh:
            torch.save(checkpoint, fh)
            fh.flush()
            os.fsync(fh.fileno())


class LinkedLastCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last.ckpt`` is a hard link to the checkpoint just saved, put in place atomically.

    With ``save_last=True`` Lightning serialises the same state twice an epoch (``epochNNN.ckpt``, then
    ``last.ckpt``), two writes and two fsyncs of ~12 MB for the MNIST model and its Adam state. Its
    ``save_last="link"`` writes once, but as a symlink: removed before it is remade, and dangling from the next
    epoch's removal of ``epochNNN.ckpt`` until the new link, so a job killed in between resumes from nothing. Here
    the link is a hard link made beside ``last.ckpt`` and renamed over it: one write an epoch, and at every instant
    a complete ``last.ckpt`` (removing the ``epochNNN.ckpt`` name frees nothing ``last.ckpt`` still links). Where a
    hard link cannot be made (file systems without them, another device) it is a copy, synced and renamed the same
    way; remote paths (``s3://...``), and a step where no other checkpoint was saved, save ``last.ckpt`` as
    ``save_last=True`` does.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("save_last", "link")
        super().__init__(*args, **kwargs)

    def _generate_state_key(self, **kwargs: Any) -> str:
        # ModelCheckpoint's key: a run checkpointed before this class resumes with its state (the last and kept
        # files' paths). Under another key it started blank: it wrote last-v1.ckpt beside last.ckpt and never
        # removed the old epoch's file.
        return f"{ModelCheckpoint.__qualname__}{kwargs!r}"

    def _link_checkpoint(self, trainer: L.Trainer, filepath: str, linkpath: str) -> None:
        # Lightning links the last top-k file even when this save made none (a monitored metric that did not
        # improve): last.ckpt would go back in time. Only a file saved at this very step is linked.
        if "://" in str(linkpath) or self._last_global_step_saved != trainer.global_step:
            self._save_checkpoint(trainer, linkpath)
            return
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            with _staged(Path(linkpath), "link") as tmp:
                try:
                    os.link(filepath, tmp)
                except OSError:
                    shutil.copyfile(filepath, tmp)
                    with open(tmp, "rb+") as fh:
                        os.fsync(fh.fileno())
        trainer.strategy.barrier()


class SignalCheckpoint(L.Callback):
    """Saves ``<ModelCheckpoint dirpath>/last.ckpt`` when the run stops on SIGTERM or Ctrl-C.

    Only these stops: a run that fails (a NaN, a bug) keeps its last good checkpoint instead of
    overwriting it with the state that failed.
    """

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            return
        ckpt = next((cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath), None)
        if ckpt is None:
            return
        path = Path(ckpt.dirpath) / f"{ckpt.CHECKPOINT_NAME_LAST}{ckpt.FILE_EXTENSION}"
        trainer.save_checkpoint(path)
