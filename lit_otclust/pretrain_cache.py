"""One pre-training for the runs that would each repeat it: ``--pretrain_cache DIR``.

The (p) configs of one seed pre-train the same autoencoder on the same batches; OT, soft k-means and their variants
differ only from the switch to the joint phase on. With a cache folder, a fit

- whose pre-training DIR holds, and which has no checkpoint of its own, starts from it as a run resumed at the switch,
  so it ends where the run that pre-trains itself ends. Its CSV log (and W&B run) gets the pre-training's rows as an
  earlier attempt's, and ``<root>/pretrained.json`` names what it started from;
- whose pre-training DIR lacks, writes it when its joint phase starts (:class:`SharedPretraining`): the checkpoint of
  its last pre-training epoch, without the state that belongs to one run, and its logs' rows of those epochs.

A pre-training is found by a hash of the resolved config (:func:`pretraining_key`) without the settings that act only
from the switch on or not on training at all (:data:`_NOT_PRETRAINING`); every other setting must match. The code is
not in the key: empty the folder when the code of the pre-training changes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn

from lit_otclust.checkpointing import AtomicCheckpointIO
from lit_otclust.runfiles import csv_logs

CHECKPOINT, ROWS, SOURCE = "pretrained.ckpt", "metrics.csv", "source.json"
STARTED_FROM = "pretrained.json"  # in the run's folder: the cache entry it started from
# The decision of global rank 0, for the ranks Lightning's launcher starts later: a pre-training written in between
# by another run must not make them start elsewhere.
ENV = "LIT_OTCLUST_PRETRAINED"
# Settings that act from the switch on, or not on training at all (dotted paths into the resolved config).
_NOT_PRETRAINING = ("config", "ckpt_path", "pretrain_cache", "wandb", "figures", "model.loss", "model.proportions",
                    "model.clustering_weight", "model.assignment", "phases.refit_epochs", "phases.refit_every",
                    "phases.warmup_steps", "trainer.max_epochs", "trainer.default_root_dir",
                    "trainer.enable_progress_bar", "trainer.enable_model_summary", "trainer.logger",
                    "data.init_args.download")


def pretraining_key(config: dict[str, Any]) -> str:
    """A short hash of the resolved fit ``config`` over the settings that pre-training reads (with ``phases.kmeans_at:
    switch`` the centers' initialisation comes after it, so it is left out too)."""
    config = json.loads(json.dumps(config))  # a deep copy
    dropped = list(_NOT_PRETRAINING)
    if (config.get("phases") or {}).get("kmeans_at", "switch") == "switch":
        dropped += ["phases.center_init", "phases.match_proportions"]
    for path in dropped:
        *parents, last = path.split(".")
        node = config
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def start_from_cache(entry: Path, root: Path) -> Path | None:
    """The checkpoint a fit in ``root`` starts from, if ``entry`` (the cache folder of its key) holds its
    pre-training and ``root`` has no checkpoint of its own; None otherwise. Global rank 0 decides (the other ranks
    read its answer from :data:`ENV`), and gives the run's CSV log the pre-training's rows as an earlier version."""
    if ENV in os.environ and rank_zero_only.rank != 0:
        return Path(os.environ[ENV]) if os.environ[ENV] else None
    own = any((root / "checkpoints").glob("last*.ckpt"))
    found = entry / CHECKPOINT if not own and (entry / CHECKPOINT).is_file() else None
    os.environ[ENV] = str(found or "")
    if found is not None and rank_zero_only.rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        _copy_rows(entry / ROWS, root / "csv")
        source = json.loads((entry / SOURCE).read_text()) if (entry / SOURCE).is_file() else {}
        (root / STARTED_FROM).write_text(json.dumps({"checkpoint": str(found), **source}, indent=1) + "\n")
    return found


def _copy_rows(rows: Path, csv_root: Path) -> None:
    """The pre-training's rows as the next version of the run's CSV log (the fit's own logs take the one after)."""
    if not rows.is_file():
        return
    versions = [int(p.name.split("_")[1]) for p in csv_root.glob("version_*") if p.name.split("_")[1].isdigit()]
    folder = csv_root / f"version_{max(versions, default=-1) + 1}"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_bytes(rows.read_bytes())


class SharedPretraining(L.Callback):
    """Writes this fit's pre-training into its cache folder ``entry`` when the joint phase starts, unless the folder
    has one (the module docstring).

    Args:
        entry: the cache folder of this fit's :func:`pretraining_key`.
        pretrain_epochs: the epoch the joint phase starts at (``phases.pretrain_epochs``).
        run: the fit's folder, named in the entry's ``source.json``.
    """

    def __init__(self, entry: Path, pretrain_epochs: int, run: Path) -> None:
        self.entry, self.pretrain_epochs, self.run = Path(entry), pretrain_epochs, Path(run)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if (self.pretrain_epochs == 0 or trainer.current_epoch != self.pretrain_epochs or not trainer.is_global_zero
                or (self.entry / CHECKPOINT).exists()):
            return
        ckpt = next((cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath), None)
        last = Path(ckpt.dirpath) / f"{ckpt.CHECKPOINT_NAME_LAST}{ckpt.FILE_EXTENSION}" if ckpt else None
        if last is None or not last.is_file():
            rank_zero_warn(f"--pretrain_cache: no last.ckpt to share (a checkpoint callback with save_last writes it); "
                           f"{self.entry} stays empty")
            return
        state = torch.load(last, map_location="cpu", weights_only=False)
        phase = state.get("callbacks", {}).get("PhaseSwitch", {}).get("phase")
        if state.get("epoch") != self.pretrain_epochs - 1 or phase != "pretrain":
            rank_zero_warn(f"--pretrain_cache: {last} is not the end of pre-training (epoch {state.get('epoch')}, "
                           f"phase {phase}); {self.entry} stays empty")
            return
        # What belongs to this run alone: the loss's buffers and the proportions (the module that starts from the
        # entry keeps its own: DeepClustering.on_load_checkpoint) and the checkpoint callback's paths.
        state["state_dict"] = {k: v for k, v in state["state_dict"].items()
                               if not k.startswith("loss.") and k != "proportions"}
        state["callbacks"] = {k: v for k, v in state.get("callbacks", {}).items() if not k.startswith("ModelCheckpoint")}
        self.entry.mkdir(parents=True, exist_ok=True)
        self._write_rows(trainer)
        (self.entry / SOURCE).write_text(json.dumps({"source": str(self.run)}) + "\n")
        AtomicCheckpointIO().save_checkpoint(state, self.entry / CHECKPOINT)  # last: its presence says the entry is whole

    def _write_rows(self, trainer: L.Trainer) -> None:
        """The CSV log's rows of the pre-training epochs, over every version of this run's log (later ones win)."""
        csv_logger = next((lg for lg in trainer.loggers if isinstance(lg, CSVLogger)), None)
        if csv_logger is None:
            return
        csv_logger.save()  # the rows logged so far, on disk
        rows: dict[tuple, dict[str, str]] = {}
        for path in csv_logs(csv_logger.root_dir):
            with open(path, newline="") as fh:
                for row in csv.DictReader(fh):
                    if row.get("epoch") and int(float(row["epoch"])) < self.pretrain_epochs:
                        rows[(row.get("step"), tuple(sorted(k for k, v in row.items() if v)))] = row
        ordered = sorted(rows.values(), key=lambda row: int(float(row.get("step") or 0)))  # W&B takes rising steps
        fields = list(dict.fromkeys(k for row in ordered for k in row))
        tmp = self.entry / f".{ROWS}.tmp-{os.getpid()}"
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            writer.writerows(ordered)
        os.replace(tmp, self.entry / ROWS)
