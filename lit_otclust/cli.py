"""``python -m lit_otclust {fit,validate,test,predict} --config configs/....yaml``.

A LightningCLI that
- links the data module's ``num_classes`` and ``input_shape`` to the model (K and the
  autoencoder's input), so no config states them twice;
- always adds the :class:`PhaseSwitch` callback, configured under ``phases:``, and the
  :class:`ClusterFigures` callback (pictures of the clusters), configured under ``figures:``
  (unless ``trainer.callbacks`` already has one);
- when the config gives no logger, logs to CSV and to W&B under ``trainer.default_root_dir``.
  W&B runs offline when no credentials are found: it never prompts or waits for the network,
  and ``wandb sync <default_root_dir>/wandb/offline-run-*`` uploads the run later. Checkpoints
  go to W&B as artifacts only with ``--wandb.log_model true`` (or ``all``);
- sets up every W&B run (:class:`RunConfig`): the resolved config as the run's config, tags
  naming the method and the data set, ``epoch`` as the x-axis of the per-epoch metrics, and
  the best and the last ``val/acc`` in the run summary;
- saves checkpoints (``last.ckpt`` included) in ``<default_root_dir>/checkpoints``, written
  atomically, and ``last.ckpt`` again when SIGTERM or Ctrl-C stops the run
  (:mod:`lit_otclust.checkpointing`), so ``--ckpt_path last`` resumes a run, mid-epoch included;
- with ``--pretrain_cache DIR``, shares pre-trainings between fits that would repeat one
  (:mod:`lit_otclust.pretrain_cache`);
- prints a summary when ``fit`` or ``predict`` ends (:class:`RunSummary`): the last and best
  ``val/acc`` with their NMI, ARI and epoch, where the outputs are, and the command that resumes
  the run; the predictions file, its rows and their matched accuracy.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, ProgressBar, TQDMProgressBar
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.plugins.environments import ClusterEnvironment, SLURMEnvironment
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning_utilities.core import rank_zero

from lit_otclust.callbacks import ClusterWriter, RunSummary
from lit_otclust.checkpointing import AtomicCheckpointIO, SignalCheckpoint
from lit_otclust.data.folder import UnreadableImagesError
from lit_otclust.figures import ClusterFigures
from lit_otclust.legacy import check_argv
from lit_otclust.losses import ClusteringLoss
from lit_otclust.phases import PhaseSwitch
from lit_otclust.pretrain_cache import SharedPretraining, pretraining_key, start_from_cache
from lit_otclust.startup import resolve_wandb_mode
from lit_otclust.system import DeepClustering
from lit_otclust.wandb_run import ResumableWandbLogger, close_after_stop

SIGTERM_EXIT = 143
# A progress bar refresh rate above any epoch's batch count: Lightning's bar then updates at each epoch's last batch.
EPOCH_END_ONLY = 2**31 - 1


def default_loggers(root: Path, name: str, log_model: bool | Literal["all"] = False, group: str | None = None,
                    job_type: str | None = None, tags: list[str] | None = None, resume: bool = False) -> list:
    """CSV and W&B under ``root``; ``group``, ``job_type`` and ``tags`` place the W&B run among others (a study's
    runs share a group, a Table 1 column is a job type, its seed and grid settings are tags). ``resume``: the fit
    resumes from a checkpoint, and continues the W&B run of the attempts before (:mod:`lit_otclust.wandb_run`).
    Without the wandb package installed (a bare GPU image, say) the fit logs to CSV alone, with a warning."""
    csv_logger = CSVLogger(save_dir=str(root), name="csv")
    if importlib.util.find_spec("wandb") is None:
        rank_zero_warn("the wandb package is not installed: this fit logs to CSV alone, under "
                       f"{root / 'csv'} (pip install wandb for the W&B run)")
        return [csv_logger]
    offline = resolve_wandb_mode() in ("offline", "dryrun")
    if offline and log_model:
        # WandbLogger refuses the combination (an offline run cannot upload artifacts): keep the run going.
        rank_zero_warn(f"wandb.log_model={log_model!r} is ignored: W&B runs offline (no credentials, or WANDB_MODE="
                       "offline), where checkpoints cannot be logged as artifacts; they stay in checkpoints/")
        log_model = False
    wandb_dir = root / "wandb"
    wandb_dir.mkdir(parents=True, exist_ok=True)
    # Not offline=True: W&B reads WANDB_MODE=offline itself, and WandbLogger's offline=True rewrites it to "dryrun"
    # after the service started early read the environment (startup.py), which wandb.init answers with a warning
    # that the change is ignored.
    wandb_logger = ResumableWandbLogger(root, csv_logger, resume, project=os.environ.get("WANDB_PROJECT", "lit_otclust"),
                                        name=name, save_dir=str(root), log_model=log_model, group=group,
                                        job_type=job_type, tags=tags or None)
    # WandbLogger always hands wandb.init `anonymous=None`, which W&B (>= 0.19) answers on every run with "The
    # anonymous setting has no effect"; the key does nothing else, so it is dropped.
    getattr(wandb_logger, "_wandb_init", {}).pop("anonymous", None)
    return [csv_logger, wandb_logger]


def run_tags(config: dict, loss: ClusteringLoss | None) -> list[str]:
    """The method (the loss's ``tag``, ``_p`` when pre-trained; ``ae_kmeans`` without a loss) and the data module."""
    method = "ae_kmeans" if loss is None else loss.tag
    if (config.get("phases") or {}).get("pretrain_epochs", 0) > 0:
        method += "_p"
    data = config.get("data") or {}
    data_class = data.get("class_path", "") if isinstance(data, dict) else ""
    return [method, data_class.rsplit(".", 1)[-1]] if data_class else [method]


class RunConfig(SaveConfigCallback):
    """Saves ``config.yaml`` (as Lightning does) and sets up each W&B run the way its users expect.

    The resolved config (model, data, trainer, phases, figures, ...) becomes the run's config and
    names its tags (:func:`run_tags`); every metric (all are logged per epoch) is plotted against
    ``epoch`` instead of WandbLogger's ``trainer/global_step``, which is still logged alongside; the
    summary keeps both the best and the last ``val/acc``. Runs on global rank 0 only (Lightning
    calls ``save_config`` there), as the loggers do.
    """

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        loggers = [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]
        if not loggers:
            return
        config = json.loads(self.parser.dump(self.config, format="json", skip_none=False))
        config.pop("config", None)  # the paths of the config files, whose content is the rest
        # A study's fit names its study file (wandb.study), not the file's content: its `set` may hold a value that
        # the grid replaced, and this config is what ran.
        tags = run_tags(config, getattr(pl_module, "loss", None))
        for logger in loggers:
            try:
                run = logger.experiment
                run.config.update(config, allow_val_change=True)
                run.tags = tuple(dict.fromkeys([*(run.tags or ()), *tags]))
                # Lightning adds `epoch` to every metric it logs; step_sync fills it in for the others.
                run.define_metric("epoch")
                run.define_metric("*", step_metric="epoch", step_sync=True)
                run.define_metric("val/acc", step_metric="epoch", summary="max,last")
            except Exception as error:  # noqa: BLE001 - a pre-emption can end W&B's service at any moment
                if not isinstance(logger, ResumableWandbLogger):
                    raise
                logger.give_up(error)


class OTClusterCLI(LightningCLI):
    def __init__(self, *args, save_config_callback: type[SaveConfigCallback] | None = RunConfig, **kwargs) -> None:
        argv = kwargs.get("args")
        argv = sys.argv[1:] if argv is None else argv
        # The subcommand named first (`fit --config ...`), whose parser is then the only one built: Lightning builds a
        # whole parser (Trainer, model, data, callbacks) for each of fit, validate, test and predict: parsing and
        # instantiating a config took 0.194 s with the four, 0.106 s with one (measured on 2 cores). Anything
        # else (`--help`, no subcommand, a typo) gets all four, so the help lists them and a wrong name is reported
        # as before.
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
            # Lightning's raw-speed mode refuses self.log, which records this method's curves (val/acc, ...), and the
            # loggers, checkpoints and bar this command adds: say what does the same here instead of its errors.
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
        # trainer.enable_checkpointing=false: no checkpoint callback, or Lightning refuses the list (and
        # SignalCheckpoint, which saves into a ModelCheckpoint's folder, then saves nothing).
        checkpointing = trainer_cfg.get("enable_checkpointing", True) is not False
        if checkpointing and not any(isinstance(cb, ModelCheckpoint) for cb in callbacks):
            # Every epoch's state and last.ckpt, both written atomically (AtomicCheckpointIO).
            callbacks.append(ModelCheckpoint(dirpath=root / "checkpoints", filename="epoch{epoch:03d}",
                                             auto_insert_metric_name=False, save_last=True))
        bar_wanted = trainer_cfg.get("enable_progress_bar", True) is not False
        if bar_wanted and not any(isinstance(cb, ProgressBar) for cb in callbacks):
            # Lightning's default bar redraws every step: ~1.3 ms of a ~22 ms MNIST step (measured in-process,
            # benchmarks/README.md). Every 10th step is still several redraws a second. Where stdout is not a
            # terminal (a batch job's log file), each redraw is one more carriage-return segment in the log: there
            # the bar is drawn at the end of each epoch only. A bar in trainer.callbacks replaces this one.
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
            # One requeue mechanism: scripts/slurm.sbatch's (SIGTERM, exit 143, requeue). Lightning's auto-requeue
            # saves a checkpoint inside its SIGUSR1 handler, a collective that can deadlock DDP ranks.
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
                            save_config_kwargs={"overwrite": True}, args=args)
    except SIGTERMException:
        # Lightning's SIGTERMException exits with status 0, like a finished run. 143 (128 + SIGTERM, the
        # shell's convention) lets a job script tell "stopped, last.ckpt saved: requeue" from "done".
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


def console() -> None:
    """The process's entry point (``lit-otclust`` and ``python -m lit_otclust``): :func:`main` without its return
    value, which the script's ``sys.exit(...)`` would print and turn into exit status 1 after a successful run."""
    quiet_third_party_notices()
    # This process starts and owns its W&B service. A token inherited from the process that started it (a notebook, a
    # test session, a study runner that used W&B) would attach it to that one: its run would never finish there, and a
    # resumed attempt would find its own run id still in use.
    os.environ.pop("WANDB_SERVICE", None)
    if not {"-h", "--help", "--print_config"} & set(sys.argv[1:]):  # help trains nothing: no word on the cores
        warn_if_cores_are_busy()
    try:
        main()
    except SystemExit as stop:
        if stop.code == SIGTERM_EXIT and os.environ.get("LOCAL_RANK", "0") != "0" and "SLURM_PROCID" not in os.environ:
            # A rank that Lightning's launcher started: its launcher kills every process, rank 0 included, when one
            # exits non-zero; rank 0, still writing its logs, reports the stop for the run. (A second SIGTERM during
            # the exit stays pending: the entry point holds SIGTERM for the whole process.)
            raise SystemExit(0) from None
        raise


def cores_oversubscribed(load: float, cores: int, threads: int) -> bool:
    """Whether ``threads`` intra-op threads would share ``cores`` with other runnable work, judged from the
    1-minute ``load`` average, which counts this process too (up to 1 while it imports)."""
    return threads > 1 and max(load - 1.0, 0.0) + threads > cores + 0.5


def warn_if_cores_are_busy() -> None:
    """Warn when other work seems to hold the cores torch's threads will run on, unless the thread settings are
    the user's. torch's OpenMP threads spin-wait for each other at every parallel region; when another process
    holds a core, each wait lasts a scheduler time slice: with two 1-thread runs on these 2 cores, a short fit took
    51.9 s at torch's default 2 threads against 13.2 s at 1."""
    if not hasattr(os, "getloadavg") or {"OMP_NUM_THREADS", "OMP_WAIT_POLICY"} & set(os.environ):
        return
    if os.environ.get("LOCAL_RANK", "0") != "0" or os.environ.get("SLURM_PROCID", "0") != "0":  # DDP's other ranks
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load, threads = os.getloadavg()[0], torch.get_num_threads()
    if cores_oversubscribed(load, cores, threads):
        free = max(1, cores - round(max(load - 1.0, 0.0)))
        # One line on stderr, without the warning's source line, which tells a user nothing.
        print(
            f"lit_otclust: warning: the load average is {load:.1f} on the {cores} cores this run may use, and torch will run {threads} "
            f"threads: if other work is still running, they will wait on each other (a step several times slower). "
            f"Set OMP_NUM_THREADS={free} (or OMP_WAIT_POLICY=PASSIVE) in the run's environment; setting either "
            "silences this.", file=sys.stderr)


def quiet_third_party_notices() -> None:
    """Drop lines every run printed that a user can do nothing about: Lightning's advertisements for its cloud
    logger and model registry, and a deprecation inside Lightning's own code (``_pytree``) under this torch. Only at
    the process's entry point: a library must not change a caller's warning filters or logging."""
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # Under DDP Lightning recommends sync_dist for every epoch-level value logged without it. These are global
    # already: accuracy, NMI and ARI come from a torchmetrics Metric that reduces its counts over the ranks, the
    # cluster sizes are reduced by the system, and every rank counts the same unconverged solves of the one global
    # problem (DeepClustering._log_metrics, _log_sizes, on_train_epoch_end). Only their warnings are dropped.
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('(train|val|heldout)/(acc|nmi|ari|"
                            r"size_min|size_max|size_entropy|size_error|sinkhorn_unconverged)(_distance|_potential)?', \.\.\., "
                            r"sync_dist=True\)`")
    # rank_zero_info logs through this module attribute, which Lightning's import replaces with its own logger.
    rank_zero.log.addFilter(lambda record: not any(ad in record.getMessage() for ad in ("litlogger", "litmodels")))
