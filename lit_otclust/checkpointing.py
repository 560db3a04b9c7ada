"""Checkpoints that survive clusters: atomic writes, and a save when the job is told to stop.

- :class:`AtomicCheckpointIO` writes a checkpoint to a temporary file beside its target and
  renames it into place, so a job killed while writing (SIGKILL, node failure) leaves the
  previous ``last.ckpt`` readable instead of a truncated one.
- :class:`LinkedLastCheckpoint` (the CLI's checkpoint callback) makes ``last.ckpt`` a hard link to the epoch's
  checkpoint, renamed into place, instead of a second write of the same state.
- :class:`SignalCheckpoint` stops the run on SIGTERM (what ``scancel``, SLURM's ``--signal``, Kubernetes and most
  schedulers send before killing) at a batch boundary every DDP rank agrees on, and saves ``last.ckpt``; also on
  Ctrl-C in one process. With the resumable training loader (:class:`lit_otclust.data.ResumableLoader`)
  ``--ckpt_path last`` then continues with the very next batch.

On SLURM one mechanism requeues: ``scripts/slurm.sbatch`` asks for SIGTERM before the time limit and requeues the
job when the run exits 143. Lightning's own auto-requeue (SIGUSR1) is switched off by the CLI: its handler saves a
checkpoint, a collective, from inside the signal handler, which can deadlock DDP ranks.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_info
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
    """Stops the run on SIGTERM at a batch boundary that every DDP rank agrees on, saves ``last.ckpt``, and (through
    the CLI) exits 143; also saves on Ctrl-C in a single process.

    Lightning's own SIGTERM handler broadcasts from inside the handler: a rank interrupted while its peer waits in
    another collective (the distributed Sinkhorn issues several a step) waits forever in a broadcast the peer never
    reaches, and the peer in an all-reduce this rank never finishes, until the job's time limit kills both without a
    requeue. Here the handler only records the signal (and forwards it to the processes Lightning's launcher
    started, as Lightning's does). At the end of every training batch each rank reduces the flag with
    ``strategy.reduce_boolean_decision`` (one all-reduce of one element, in the main flow, which every rank reaches
    in the same order), so all ranks learn of the signal at the same batch and stop together. The stop itself is
    Lightning's: its loops check ``trainer.received_sigterm`` right after that hook and raise ``SIGTERMException``
    where the progress counters are consistent, so ``--ckpt_path last`` resumes with the next batch, exactly.
    A signal agreed on at an epoch's last batch lets that epoch's evaluation and checkpoint run first, on every rank,
    and stops after the next batch. A signal after the last training batch of the run lets it finish (exit 0).
    Bound: a stop lands within one training batch, or one evaluation pass and a batch, of the signal.

    Only these stops save: a run that fails (a NaN, a bug) keeps its last good checkpoint instead of overwriting it
    with the state that failed. Ctrl-C under DDP does not save: each rank is interrupted wherever it stands, so no
    collective save can be agreed on; the last epoch's checkpoint stays.
    """

    def __init__(self) -> None:
        self._signalled = False  # set by the handler, on this rank
        self._pending = False  # agreed at an epoch's last batch: stop after the next one
        self._launcher = None

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag: no collective and no I/O (not even logging, whose locks the interrupted code may hold).
        if not self._signalled and self._launcher is not None:
            self._launcher.kill(signum)  # ranks that Lightning's launcher started from this process
        self._signalled = True

    def _install(self, trainer: L.Trainer) -> None:
        # After Lightning registered its handlers (just before the loops start), so this one replaces its
        # in-handler broadcast; Lightning restores the original handlers when the run ends.
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) != self._on_sigterm:
            self._launcher = trainer.strategy.launcher
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._install(trainer)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._install(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # Every rank reaches this hook once a batch and in the same order; the reduction is the agreement.
        stop = trainer.strategy.reduce_boolean_decision(self._signalled, all=False) or self._pending
        if not stop:
            return
        if not self._pending and trainer.is_last_batch:  # the epoch's evaluation and checkpoint follow, on every rank: stop after them
            rank_zero_info(f"SIGTERM: stopping after epoch {trainer.current_epoch}'s evaluation and the next batch")
            self._pending = True
            return
        rank_zero_info(f"SIGTERM: every rank stops after batch {batch_idx} of epoch {trainer.current_epoch}; "
                       "saving last.ckpt")
        # Lightning's loops read this flag where a stopped run keeps consistent progress counters (the end of this
        # batch). It has no public setter; it is set here, on every rank at the same batch, never in a handler.
        trainer._signal_connector.received_sigterm = True

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            return
        if isinstance(exception, KeyboardInterrupt) and trainer.world_size > 1:
            return  # see the class docstring
        ckpt = next((cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath), None)
        if ckpt is None:
            return
        path = Path(ckpt.dirpath) / f"{ckpt.CHECKPOINT_NAME_LAST}{ckpt.FILE_EXTENSION}"
        trainer.save_checkpoint(path)
