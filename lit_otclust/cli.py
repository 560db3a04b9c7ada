"""``python -m lit_otclust {fit,validate,test,predict} --config configs/....yaml``.

A LightningCLI that
- links the data module's ``num_classes`` and ``input_shape`` to the model (K and the
  autoencoder's input), so no config states them twice;
- always adds the :class:`PhaseSwitch` callback, configured under ``phases:``;
- when the config gives no logger, logs to CSV and to W&B under ``trainer.default_root_dir``.
  W&B runs offline when no credentials are found: it never prompts or waits for the network,
  and ``wandb sync <default_root_dir>/wandb/offline-run-*`` uploads the run later;
- saves checkpoints (``last.ckpt`` included) in ``<default_root_dir>/checkpoints``, written
  atomically, and ``last.ckpt`` again when SIGTERM or Ctrl-C stops the run
  (:mod:`lit_otclust.checkpointing`), so ``--ckpt_path last`` resumes a run, mid-epoch included.
"""

from __future__ import annotations

import netrc
import os
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_otclust.callbacks import ClusterWriter, PhaseSwitch
from lit_otclust.checkpointing import AtomicCheckpointIO, SignalCheckpoint
from lit_otclust.system import DeepClustering

SIGTERM_EXIT = 143


def wandb_credentials_found() -> bool:
    """True if W&B can authenticate without asking: an API key in the environment or ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(os.environ.get("WANDB_BASE_URL", "api.wandb.ai").split("//")[-1]) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def default_loggers(root: Path, name: str) -> list:
    if "WANDB_MODE" not in os.environ and not wandb_credentials_found():
        # Without credentials, online W&B would prompt for a key (or hang without network).
        os.environ["WANDB_MODE"] = "offline"
    wandb_dir = root / "wandb"
    wandb_dir.mkdir(parents=True, exist_ok=True)
    return [CSVLogger(save_dir=str(root), name="csv"),
            WandbLogger(project=os.environ.get("WANDB_PROJECT", "lit_otclust"), name=name, save_dir=str(root),
                        offline=os.environ.get("WANDB_MODE") == "offline")]


class OTClusterCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(PhaseSwitch, "phases")
        parser.link_arguments("data.num_classes", "model.num_clusters", apply_on="instantiate")
        parser.link_arguments("data.input_shape", "model.autoencoder.init_args.input_shape", apply_on="instantiate")
        parser.link_arguments("seed_everything", "phases.seed")
        parser.link_arguments("seed_everything", "model.seed")
        parser.link_arguments("seed_everything", "data.init_args.seed")
        parser.set_defaults({"trainer.num_sanity_val_steps": 0, "trainer.default_root_dir": "runs/default"})

    def instantiate_trainer(self, **kwargs):
        trainer_cfg = self._get(self.config_init, "trainer", default={})
        root = Path(trainer_cfg.get("default_root_dir") or "runs/default")
        callbacks = list(trainer_cfg.get("callbacks") or [])
        logger = trainer_cfg.get("logger")
        if logger in (None, True):
            kwargs["logger"] = logger = default_loggers(root, root.name)
        if logger:
            callbacks.append(LearningRateMonitor(logging_interval="epoch"))
        if not any(isinstance(cb, ModelCheckpoint) for cb in callbacks):
            callbacks.append(ModelCheckpoint(dirpath=root / "checkpoints", save_last=True,
                                             filename="epoch{epoch:03d}", auto_insert_metric_name=False))
        if not any(isinstance(cb, SignalCheckpoint) for cb in callbacks):
            callbacks.append(SignalCheckpoint())
        plugins = trainer_cfg.get("plugins")
        plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins] if plugins else []
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            kwargs["plugins"] = [*plugins, AtomicCheckpointIO()]
        if self.subcommand == "predict" and not any(isinstance(cb, ClusterWriter) for cb in callbacks):
            callbacks.append(ClusterWriter(str(root)))
        # LightningCLI merges kwargs over the config's trainer settings: pass the whole list.
        return super().instantiate_trainer(callbacks=callbacks, **kwargs)


def main(args: list[str] | None = None) -> OTClusterCLI:
    try:
        return OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True,
                            save_config_kwargs={"overwrite": True}, args=args)
    except SIGTERMException:
        # Lightning's SIGTERMException exits with status 0, like a finished run. 143 (128 + SIGTERM, the
        # shell's convention) lets a job script tell "stopped, last.ckpt saved: requeue" from "done".
        raise SystemExit(SIGTERM_EXIT) from None
