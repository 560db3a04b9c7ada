"""``python -m lit_otclust {fit,validate,test,predict} --config configs/....yaml``: a LightningCLI that

- links the data module's ``num_classes`` and ``input_shape`` to the model, so no config states them twice;
- always adds :class:`PhaseSwitch` (under ``phases:``) and :class:`ClusterFigures` (under ``figures:``);
- without a logger in the config, logs to CSV and W&B (offline without credentials) (:mod:`lit_otclust.wandb_run`);
- saves every epoch's checkpoint and ``last.ckpt`` atomically, and ``last.ckpt`` again when SIGTERM or Ctrl-C stops
  the run, so ``--ckpt_path last`` resumes it, mid-epoch included (:mod:`lit_otclust.checkpointing`);
- with ``--pretrain_cache DIR``, shares pre-trainings between fits (:mod:`lit_otclust.pretrain_cache`);
- prints a summary when ``fit`` or ``predict`` ends (:class:`RunSummary`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, ProgressBar, TQDMProgressBar
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.plugins.environments import ClusterEnvironment, SLURMEnvironment
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_otclust.callbacks import ClusterWriter, RunSummary
from lit_otclust.checkpointing import AtomicCheckpointIO, SignalCheckpoint
from lit_otclust.data.folder import UnreadableImagesError
from lit_otclust.figures import ClusterFigures
from lit_otclust.legacy import check_argv
from lit_otclust.phases import PhaseSwitch
from lit_otclust.pretrain_cache import SharedPretraining, pretraining_key, start_from_cache
from lit_otclust.system import DeepClustering
from lit_otclust.wandb_run import RunConfig, close_after_stop, default_loggers

SIGTERM_EXIT = 143
# A progress bar refresh rate above any epoch's batch count: Lightning's bar then updates at each epoch's last batch.
EPOCH_END_ONLY = 2**31 - 1


class OTClusterCLI(LightningCLI):
    def __init__(self, *args, save_config_callback: type[SaveConfigCallback] | None = RunConfig, **kwargs) -> None:
        argv = kwargs.get("args")
        argv = sys.argv[1:] if argv is None else argv
        # The subcommand named first (`fit --config ...`), whose parser is then the only one built: Lightning builds a
        # whole parser for each subcommand. Anything else (`--help`, no subcommand, a typo) gets all four.
        named = isinstance(argv, (list, tuple)) and argv and argv[0] in LightningCLI.subcommands()
        self._only = argv[0] if named else None
        self._command = list(argv) if isinstance(argv, (list, tuple)) else None  # for the resume command (RunSummary)
        super().__init__(*args, save_config_callback=save_config_callback, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:
        every = LightningCLI.subcommands()
        return {self._only: every[self._only]} if self._only else every

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(PhaseSwitch, "phases")
        # Not a callback key: instantiate_trainer adds it unless trainer.callbacks already has a ClusterFigures.
        parser.add_class_arguments(ClusterFigures, "figures", fail_untyped=False, sub_configs=True)
        parser.add_argument("--wandb.log_model", type=bool | Literal["all"], default=False,
                            help="Log checkpoints to W&B as artifacts (default logger only): true at the end of "
                                 "the run, 'all' as they are written; off by default.")
        # Where this run sits among others in W&B (`experiments run` sets them for every fit of a study).
        parser.add_argument("--wandb.group", type=str | None, default=None,
                            help="W&B run group: runs of one group are drawn together (mean and spread by epoch).")
        parser.add_argument("--wandb.job_type", type=str | None, default=None,
                            help="W&B job type: within a group, the runs of one configuration (a Table 1 column).")
        parser.add_argument("--wandb.tags", type=list[str], default=[],
                            help="W&B tags, beside the method and data set's (e.g. [seed=0,clustering_weight=0.1]).")
        parser.add_argument("--wandb.study", type=str | None, default=None,
                            help="The study file this fit belongs to, named in the W&B run's config.")
        parser.add_argument("--pretrain_cache", type=str | None, default=None,
                            help="A folder of pre-trainings shared by the fits that would repeat one (same seed, data, "
                                 "autoencoder, optimiser and pretrain_epochs; any loss): a fit whose pre-training is "
                                 "there starts its joint phase from it, one whose is not writes it at its switch "
                                 "(lit_otclust.pretrain_cache).")
        parser.link_arguments("data.num_classes", "model.num_clusters", apply_on="instantiate")
        parser.link_arguments("data.input_shape", "model.autoencoder.init_args.input_shape", apply_on="instantiate")
        parser.link_arguments("seed_everything", "phases.seed")
        parser.link_arguments("seed_everything", "data.init_args.seed")
        parser.set_defaults({"trainer.num_sanity_val_steps": 0, "trainer.default_root_dir": "runs/default"})

    def instantiate_trainer(self, **kwargs):
        trainer_cfg = self._get(self.config_init, "trainer", default={})
        if trainer_cfg.get("barebones"):
            # Lightning's raw-speed mode refuses self.log and what this command adds: name what does the same here.
            raise ValueError("trainer.barebones=true refuses self.log, which records the curves of this method; for a "
                             "run without outputs pass --trainer.logger false --trainer.enable_checkpointing false "
                             "--trainer.enable_progress_bar false --figures.final false instead")
        root = Path(trainer_cfg.get("default_root_dir") or "runs/default")
        callbacks = list(trainer_cfg.get("callbacks") or [])
        self._share_pretraining(root, callbacks)
        logger = trainer_cfg.get("logger")
        if logger in (None, True):
            get = lambda key, default=None: self._get(self.config_init, f"wandb.{key}", default)  # noqa: E731
            resume = self._get(self.config_init, "ckpt_path") is not None
            kwargs["logger"] = logger = default_loggers(root, root.name, get("log_model", False), get("group"),
                                                        get("job_type"), list(get("tags") or []), resume)
        if logger:
            callbacks.append(LearningRateMonitor(logging_interval="epoch"))
        # trainer.enable_checkpointing=false: no checkpoint callback, or Lightning refuses the list.
        checkpointing = trainer_cfg.get("enable_checkpointing", True) is not False
        if checkpointing and not any(isinstance(cb, ModelCheckpoint) for cb in callbacks):
            # Every epoch's state and last.ckpt, both written atomically (AtomicCheckpointIO).
            callbacks.append(ModelCheckpoint(dirpath=root / "checkpoints", filename="epoch{epoch:03d}",
                                             auto_insert_metric_name=False, save_last=True))
        bar_wanted = trainer_cfg.get("enable_progress_bar", True) is not False
        if bar_wanted and not any(isinstance(cb, ProgressBar) for cb in callbacks):
            # Lightning's default bar redraws every step, a host-side cost for a small model; in a log file (not a
            # terminal) each redraw is one more segment, so there it is drawn at each epoch's end only.
            callbacks.append(TQDMProgressBar(refresh_rate=10 if sys.stdout.isatty() else EPOCH_END_ONLY))
        if not any(isinstance(cb, SignalCheckpoint) for cb in callbacks):
            callbacks.append(SignalCheckpoint())
        if not any(isinstance(cb, ClusterFigures) for cb in callbacks):
            callbacks.append(self._get(self.config_init, "figures"))
        plugins = trainer_cfg.get("plugins")
        plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins] if plugins else []
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            plugins.append(AtomicCheckpointIO())
        if SLURMEnvironment.detect() and not any(isinstance(p, ClusterEnvironment) for p in plugins):
            # One requeue mechanism: scripts/slurm.sbatch's (lit_otclust.checkpointing's module docstring).
            plugins.append(SLURMEnvironment(auto_requeue=False))
        kwargs["plugins"] = plugins
        if self.subcommand == "predict" and not any(isinstance(cb, ClusterWriter) for cb in callbacks):
            callbacks.append(ClusterWriter(str(root)))
        if not any(isinstance(cb, RunSummary) for cb in callbacks):
            callbacks.append(RunSummary(self._command, program_name()))
        # LightningCLI merges kwargs over the config's trainer settings: pass the whole list.
        return super().instantiate_trainer(callbacks=callbacks, **kwargs)

    def _share_pretraining(self, root: Path, callbacks: list) -> None:
        """``--pretrain_cache``: start ``fit`` from the cached pre-training where there is one and the run has no
        checkpoint of its own (as if resumed at the switch), and write it at the switch where there is none."""
        folder = self._get(self.config_init, "pretrain_cache")
        pretrain_epochs = self._get(self.config_init, "phases").pretrain_epochs
        if folder is None or self.subcommand not in ("fit", None) or pretrain_epochs == 0:
            return
        parser = self._parser(self.subcommand)
        config = self.config[self.subcommand] if self.subcommand else self.config
        entry = Path(folder) / pretraining_key(json.loads(parser.dump(config, format="json", skip_none=False)))
        callbacks.append(SharedPretraining(entry, pretrain_epochs, root))
        if self.subcommand == "fit" and self._get(self.config_init, "ckpt_path") in (None, "last"):
            found = start_from_cache(entry, root)
            if found is not None:
                self.config_init[self.subcommand]["ckpt_path"] = str(found)


def program_name() -> str:
    """How this process was started, as the commands a run prints should start: the installed script's name
    (``lit-otclust``), else ``python -m lit_otclust``."""
    return "lit-otclust" if Path(sys.argv[0]).name == "lit-otclust" else "python -m lit_otclust"


def main(args: list[str] | None = None) -> OTClusterCLI:
    try:
        check_argv(sys.argv[1:] if args is None else list(args))
    except ValueError as error:  # a flag of before `model.loss`, or a retired option: where it went, no traceback
        raise SystemExit(f"{program_name()}: error: {error}") from None
    try:
        return OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True,
                            save_config_kwargs={"overwrite": True}, args=args,
                            auto_configure_optimizers=False)  # the model's own `optimizer` and `lr_scheduler`
    except SIGTERMException:
        # Lightning's SIGTERMException exits 0, like a finished run; 143 (128 + SIGTERM) tells a job script to requeue.
        close_after_stop(SIGTERM_EXIT)
        raise SystemExit(SIGTERM_EXIT) from None
    except ValueError as error:
        cause = error  # jsonargparse wraps what a data module raises while it is built: find it in the chain
        while cause is not None and not isinstance(cause, UnreadableImagesError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        # Bad files, found before any logger or W&B run exists: the message, as a usage error ends, no traceback.
        raise SystemExit(f"{program_name()}: error: {cause}") from None
