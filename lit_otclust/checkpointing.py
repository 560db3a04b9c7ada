"""Checkpoints that survive clusters: atomic writes, and a save when the job is told to stop.

- :class:`AtomicCheckpointIO` writes a checkpoint to a temporary file beside its target and renames it into place,
  so a job killed while writing leaves the previous ``last.ckpt`` readable instead of a truncated one.
- :class:`SignalCheckpoint` stops the run on SIGTERM (what schedulers send before killing) at a batch boundary every
  DDP rank agrees on, and saves ``last.ckpt``; also on Ctrl-C in one process. With the resumable training loader
  (:class:`lit_otclust.data.ResumableLoader`) ``--ckpt_path last`` then continues with the very next batch.

On SLURM ``scripts/slurm.sbatch`` asks for SIGTERM before the time limit and requeues the job when the run exits 143;
the CLI switches Lightning's auto-requeue off (its SIGUSR1 handler saves, a collective, which can deadlock DDP ranks).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_otclust.startup import clear_sigterm, record_sigterm, take_sigterm


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to ``.<name>.tmp-<pid>`` in the target's folder, fsync, then ``os.replace``: a reader sees the
    old checkpoint or the new one, never a partial file. Remote paths (``s3://...``) go through Lightning's writer."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        try:
            with open(tmp, "wb") as fh:
                torch.save(checkpoint, fh)
                fh.flush()
                os.fsync(fh.fileno())  # the bytes on disk before the name points at them
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


class SignalCheckpoint(L.Callback):
    """Stops the run on SIGTERM at a batch boundary that every DDP rank agrees on, saves ``last.ckpt``, and (through
    the CLI) exits 143; also saves on Ctrl-C in a single process.

    Lightning's own SIGTERM handler broadcasts from inside the handler, which deadlocks a rank interrupted while its
    peer waits in another collective. Here no handler does any work: ``fit``'s entry point holds SIGTERM pending
    (:func:`lit_otclust.startup.hold_sigterm`); in a fit started in-process, Lightning's handler is replaced by one that
    only records it (and forwards it to the launcher's processes). At the end of every training batch the ranks agree
    on "SIGTERM received" by one ``strategy.reduce_boolean_decision`` and stop together, through Lightning's own
    ``trainer.received_sigterm``, where the progress counters are consistent: ``--ckpt_path last`` resumes with the
    next batch, exactly. At an epoch's last batch the epoch's evaluation and checkpoint run first; after the run's last
    batch the run finishes (exit 0).

    Only these stops save: a run that fails keeps its last good checkpoint. Ctrl-C under DDP does not save: each rank
    is interrupted wherever it stands, so no collective save can be agreed on.
    """

    def __init__(self) -> None:
        self._pending = False  # agreed at an epoch's last batch: stop after the next one
        self._launcher, self._forwarded = None, False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if not self._forwarded and self._launcher is not None:
            self._forwarded = True
            self._launcher.kill(signum)  # ranks that Lightning's launcher started from this process
        record_sigterm(signum, frame)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Where SIGTERM is not held (a fit started in-process): Lightning builds its SIGTERM handler, just before
        # the loops start, from the connector's notifier, whose broadcast is the deadlock; this flag-only handler
        # takes its place for the whole run. The notifier has no public replacement.
        self._launcher = trainer.strategy.launcher
        trainer._signal_connector._sigterm_notifier_fn = self._on_sigterm

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # Every rank reaches this hook once a batch and in the same order; the reduction is the agreement.
        stop = trainer.strategy.reduce_boolean_decision(take_sigterm(), all=False) or self._pending
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

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        clear_sigterm()  # a signal after the last batch: the run is complete
        self._pending = False

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            return
        clear_sigterm()  # this stop answers the signal
        self._pending = False
        if isinstance(exception, KeyboardInterrupt) and trainer.world_size > 1:
            return  # see the class docstring
        ckpt = next((cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath), None)
        if ckpt is None:
            return
        path = Path(ckpt.dirpath) / f"{ckpt.CHECKPOINT_NAME_LAST}{ckpt.FILE_EXTENSION}"
        trainer.save_checkpoint(path, weights_only=False)  # the full state, to resume from
