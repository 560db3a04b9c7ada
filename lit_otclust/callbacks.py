"""Callbacks: the phase switch of the paper's algorithm, a per-sample prediction writer, and the summary a run
prints when it ends."""

from __future__ import annotations

import csv
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor

from lit_otclust.clustering import embed_samples, kmeans, labelled_examples, match_labels, match_sizes
from lit_otclust.data import eval_batch_size
from lit_otclust.figures import ClusterFigures
from lit_otclust.metrics import hungarian_accuracy
from lit_otclust.sinkhorn import squared_distances

MATCHINGS = ("none", "sizes", "labels")


class PhaseSwitch(L.Callback):
    """Autoencoder pre-training for ``pretrain_epochs``, then k-means init of mu, then the joint loss.

    With ``pretrain_epochs = 0`` this is the paper's Algorithm 2 as written: the centers are
    initialised by k-means on the embeddings of the *untrained* encoder, before the first step.

    The phase lives in this callback's ``state_dict``, so a run resumed from a checkpoint taken in
    either phase continues where it was: the centers are initialised exactly once, and a resumed
    joint-phase run never re-initialises them (they come from the checkpoint).

    Which center carries which proportion: the OT loss gives center k the mass
    ``model.proportions[k]``, and k-means returns its centers in no particular order. With a
    non-uniform w, ``match_proportions`` reorders them after k-means (:mod:`lit_otclust.clustering`):

    - ``"sizes"`` (default): the k-means cluster sizes are matched to w (Hungarian algorithm on the
      squared differences: the largest cluster carries the largest w, and so on down). Needs no
      labels. A uniform w leaves the k-means order as it is.
    - ``"labels"``: ``labelled_per_class`` seeded examples of each class of the fitted samples
      pin classes to centers: center k is the k-means cluster where class k's examples fall most
      (Hungarian algorithm on their counts). Only those examples' labels are read. This assumes
      ``proportions[k]`` is the proportion of class k, as with ``data.class_proportions``.
    - ``"none"``: the k-means order.

    Args:
        pretrain_epochs: epochs of reconstruction-only training before the joint phase.
        kmeans_n_init: k-means++ restarts for the centers' initialisation.
        seed: seeds that k-means (and the draw of the labelled examples).
        match_proportions: ``"sizes"``, ``"labels"`` or ``"none"``: how the k-means centers are
            ordered to meet the proportions (above).
        labelled_per_class: labelled examples per class for ``match_proportions="labels"``.
        kmeans_at: when the centers are initialised. ``"switch"`` (default): by k-means on the
            pre-trained embedding when the joint phase starts (the DKM/DEC practice; while
            pre-training, evaluation refits k-means every epoch). ``"start"``: the paper's Algorithm
            read literally: k-means on the *untrained* encoder's embedding before the first step,
            kept through pre-training (evaluation scores those fixed centers) and into the joint
            phase. The same with ``pretrain_epochs=0``.
        center_init: what that initialisation draws. ``"kmeans"`` (default): k-means on the embeddings, as
            above. ``"uniform"``: uniform in [-1, 1]^p, seeded by ``seed`` (DKM's initialisation without
            pre-training), then ordered by ``match_proportions`` like k-means centers. Evaluation while
            pre-training still scores k-means centers of the current embedding.
    """

    def __init__(self, pretrain_epochs: int = 0, kmeans_n_init: int = 10, seed: int = 0,
                 match_proportions: Literal["none", "sizes", "labels"] = "sizes", labelled_per_class: int = 10,
                 kmeans_at: Literal["switch", "start"] = "switch", center_init: Literal["kmeans", "uniform"] = "kmeans") -> None:
        if pretrain_epochs < 0:
            raise ValueError(f"pretrain_epochs must be >= 0, got {pretrain_epochs}")
        if kmeans_n_init < 1:
            raise ValueError(f"kmeans_n_init must be >= 1, got {kmeans_n_init}")
        if match_proportions not in MATCHINGS:
            raise ValueError(f"match_proportions must be one of {MATCHINGS}, got {match_proportions!r}")
        if labelled_per_class < 1:
            raise ValueError(f"labelled_per_class must be >= 1, got {labelled_per_class}")
        if kmeans_at not in ("switch", "start"):
            raise ValueError(f"kmeans_at must be 'switch' or 'start', got {kmeans_at!r}")
        if center_init not in ("kmeans", "uniform"):
            raise ValueError(f"center_init must be 'kmeans' or 'uniform', got {center_init!r}")
        self.pretrain_epochs = pretrain_epochs
        self.kmeans_n_init = kmeans_n_init
        self.seed = seed
        self.match_proportions = match_proportions
        self.labelled_per_class = labelled_per_class
        self.kmeans_at = kmeans_at
        self.center_init = center_init
        self.phase = "pretrain"
        self.switch_epoch: int | None = None
        self.initialised = False  # kmeans_at="start": the centers were set before the first step

    def state_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "switch_epoch": self.switch_epoch, "initialised": self.initialised}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.phase = state_dict["phase"]
        self.switch_epoch = state_dict["switch_epoch"]
        self.initialised = state_dict.get("initialised", False)  # absent from checkpoints written before it

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for attr in ("centers", "embed", "joint"):
            if not hasattr(pl_module, attr):
                raise AttributeError(f"PhaseSwitch needs a module with `{attr}` (a DeepClustering); "
                                     f"{type(pl_module).__name__} has none")
        if stage != "fit" or self.phase == "joint":
            return
        # Checked before the first step, not when the switch comes (after all of pre-training).
        if getattr(trainer.datamodule, "fit_set", None) is None:
            raise ValueError("PhaseSwitch initialises the centers by k-means on every fitted image and reads them from "
                             "the data module's `fit_set`; pass a data module that has one (e.g. MNISTDataModule) "
                             "instead of bare dataloaders")
        if self.match_proportions == "labels":
            labels, K = trainer.datamodule.fit_set.y, len(pl_module.centers)
            if (labels < 0).any() or int(labels.max()) >= K:
                raise ValueError(f"phases.match_proportions='labels' reads a few labels of each class 0..{K - 1} "
                                 f"(one class per cluster) from the fitted samples, but their labels span "
                                 f"[{int(labels.min())}, {int(labels.max())}] (-1: no label); use 'sizes'")
        clustering = getattr(pl_module.hparams, "clustering", "ot")
        max_epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs >= 0 else None
        if clustering != "none" and max_epochs is not None and self.pretrain_epochs >= max_epochs:
            if not trainer.fast_dev_run:  # Lightning's one-epoch check of the code, whatever max_epochs says
                raise ValueError(f"phases.pretrain_epochs ({self.pretrain_epochs}) must be below trainer.max_epochs "
                                 f"({max_epochs}), or the clustering loss never trains")
            rank_zero_info(f"trainer.fast_dev_run runs one epoch, so only pre-training (phases.pretrain_epochs = "
                           f"{self.pretrain_epochs}); --phases.pretrain_epochs 0 runs the clustering loss instead")
        batch_size = getattr(trainer.datamodule, "batch_size", None)
        if clustering == "ot" and batch_size is not None and batch_size < len(pl_module.centers):
            raise ValueError(f"data batch_size ({batch_size}) is below the number of clusters "
                             f"({len(pl_module.centers)}): a batch cannot fill every cluster's share")
        wanted = getattr(trainer.datamodule, "class_proportions", None)
        proportions = getattr(pl_module, "proportions", None)
        if clustering == "ot" and wanted is not None and proportions is not None and not torch.allclose(
                torch.tensor(wanted, dtype=torch.float64), proportions.detach().double().cpu(), atol=1e-6):
            # A warning, not an error: a misspecified w is a legitimate experiment.
            rank_zero_warn(f"the data are subsampled to class_proportions {list(wanted)} but the OT loss prescribes "
                           f"proportions {proportions.tolist()}; pass the same values as --model.proportions "
                           f"unless the mismatch is the point")

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Runs after a checkpoint's callback state is restored, so `phase` is already the resumed one.
        pl_module.joint = self.phase == "joint"

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.kmeans_at == "start" and not self.initialised and self.phase == "pretrain":
            self.init_centers(trainer, pl_module)
            self.initialised = True
        if self.phase == "pretrain" and trainer.current_epoch >= self.pretrain_epochs:
            if self.kmeans_at == "switch":
                self.init_centers(trainer, pl_module)
            self.restart_optimization(trainer, pl_module)
            self.phase, self.switch_epoch = "joint", trainer.current_epoch
            pl_module.joint_start_epoch.fill_(trainer.current_epoch)
        pl_module.joint = self.phase == "joint"

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Pre-training, and the AE + k-means baseline throughout, are scored by k-means on the current
        # embeddings: fit the centers here, as a step of training, so that evaluation only reads them
        # (and `validate`/`test`/`predict` from a checkpoint use the centers of the run).
        refit = (self.phase == "pretrain" and self.kmeans_at == "switch") or getattr(pl_module.hparams, "clustering", "ot") == "none"
        if trainer.state.fn == "fit" and refit:
            self.init_centers(trainer, pl_module, "kmeans")

    @staticmethod
    def restart_optimization(trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The joint phase starts its own optimisation, as the paper's Algorithm has two loops.

        - The centers' Adam state is dropped. While pre-training they get zero gradients but Adam
          still counts steps, so at the switch its bias correction is ~1 with second moments ~0:
          the first joint updates of the centers would be ~3x the learning rate for hundreds of steps.
        - Each epoch-interval scheduler restarts at epoch 0 with the initial learning rates, so the
          step decay counts joint epochs (else the (p) runs start the joint phase decayed).
        """
        for opt in trainer.optimizers:
            opt.state.pop(pl_module.centers, None)
        for config in trainer.lr_scheduler_configs:
            sched = config.scheduler
            sched.last_epoch = 0
            for group, lr in zip(sched.optimizer.param_groups, sched.base_lrs):
                group["lr"] = lr

    @torch.no_grad()
    def init_centers(self, trainer: L.Trainer, pl_module: L.LightningModule,
                     method: Literal["kmeans", "uniform"] | None = None) -> None:
        """mu <- k-means on the embeddings of all fitted samples (every rank embeds them all), or uniform draws
        (``method``, default ``center_init``), in the order ``match_proportions`` gives; rank 0 computes them
        and broadcasts, so every rank has the same."""
        was_training = pl_module.training
        pl_module.eval()
        x = trainer.datamodule.fit_set.x  # (N, *input_shape): the fitted samples, in memory
        z = embed_samples(pl_module, x, eval_batch_size(trainer.datamodule))
        pl_module.train(was_training)
        if trainer.is_global_zero:
            K, p = pl_module.centers.shape
            if (method or self.center_init) == "uniform":
                centers = 2 * torch.rand(K, p, generator=torch.Generator().manual_seed(self.seed)) - 1  # (K, p), CPU
            else:
                centers = kmeans(z, K, self.kmeans_n_init, self.seed)  # (K, p), CPU
            centers = centers.to(z.dtype)  # float32 either way; z has the module's dtype (float64 at precision 64)
            order = self.center_order(z.cpu(), centers, pl_module.proportions.cpu(), trainer.datamodule.fit_set.y.cpu())
            centers = centers[order].to(pl_module.centers)
        else:
            centers = torch.empty_like(pl_module.centers)
        centers = trainer.strategy.broadcast(centers, src=0)
        pl_module.centers.data.copy_(centers)

    def center_order(self, z: Tensor, centers: Tensor, proportions: Tensor, labels: Tensor) -> Tensor:
        """The order of the k-means centers (K,) that ``match_proportions`` asks for, from the embeddings z (N, p)."""
        K = len(centers)
        if self.match_proportions == "sizes":
            nearest = squared_distances(z, centers).argmin(1)  # (N,)
            return match_sizes(torch.bincount(nearest, minlength=K) / len(z), proportions)
        if self.match_proportions == "labels":
            chosen = labelled_examples(labels, self.labelled_per_class, K, self.seed)  # (n,)
            return match_labels(squared_distances(z[chosen], centers).argmin(1), labels[chosen], K)
        return torch.arange(K)


class ClusterWriter(BasePredictionWriter):
    """Writes ``predictions.csv`` (one row per sample: index, cluster, label, matched class, distance).

    The matched class is each cluster's class under the Hungarian matching computed on the
    predicted samples' labels. Under DDP each rank writes ``predictions-rank{R}.csv`` and the
    matching is that rank's; concatenate the files for the whole set. When the predicted samples
    were read from files (the dataset has ``paths``, as :mod:`lit_otclust.data.folder`'s image
    folders do), a ``file`` column names each sample's file. Where the data module names its classes
    (``class_names``: an image folder's sub-folders, CIFAR-10's names), ``label_name`` and
    ``matched_class_name`` follow ``label`` and ``matched_class``. A sample without a label (y = -1)
    gets empty label and matched-class cells. After writing, ``path``, ``rows``, ``accuracy``
    (the share of the labelled rows whose matched class is their label; None without labels) and
    ``clusters`` (each cluster's rows and the name of its matched class, None where it has none) say
    what was written, for :class:`RunSummary`.

    Args:
        output_dir: folder for the file; the trainer's ``default_root_dir`` if None.
    """

    def __init__(self, output_dir: str | None = None) -> None:
        super().__init__(write_interval="epoch")
        self.output_dir = output_dir
        self.path: Path | None = None
        self.rows = 0
        self.accuracy: float | None = None
        self.clusters: list[tuple[int, str | None]] = []  # per cluster: (rows, matched class's name or None)

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices) -> None:
        outs = predictions[0] if predictions and isinstance(predictions[0], list) else predictions
        cols = {k: torch.cat([o[k] for o in outs]).cpu() for k in outs[0]}
        K = len(pl_module.centers)
        labelled = cols["label"] >= 0  # -1: no label
        matched = torch.full_like(cols["cluster"], -1)
        if labelled.any():
            num_classes = int(max(cols["label"].max().item() + 1, K))
            matching = hungarian_accuracy(cols["cluster"][labelled], cols["label"][labelled], K, num_classes)["matching"]
            matched = matching[cols["cluster"]]
        loaders = trainer.predict_dataloaders
        loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
        paths = getattr(getattr(loader, "dataset", None), "paths", None)  # per sample index, or None
        names = getattr(trainer.datamodule, "class_names", None)  # per class, or None

        def cells(label: int) -> list:  # a class's number, and its name where the data module names classes
            return [label, *([names[label] if 0 <= label < len(names) else ""] if names is not None else [])]

        folder = Path(self.output_dir or trainer.default_root_dir)
        folder.mkdir(parents=True, exist_ok=True)
        name = "predictions.csv" if trainer.world_size == 1 else f"predictions-rank{trainer.global_rank}.csv"
        order = cols["index"].argsort()
        with open(folder / name, "w", newline="") as fh:
            out = csv.writer(fh)
            named = ["label", "label_name", "matched_class", "matched_class_name"]
            out.writerow(["index", *(["file"] if paths is not None else []), "cluster",
                          *(named if names is not None else named[::2]), "distance"])
            blank = [""] * len(cells(0))
            for i in order.tolist():
                index, has_label = int(cols["index"][i]), bool(labelled[i])
                out.writerow([index, *([paths[index]] if paths is not None else []), int(cols["cluster"][i]),
                              *(cells(int(cols["label"][i])) if has_label else blank),
                              *(cells(int(matched[i])) if has_label else blank), f"{float(cols['distance'][i]):.6g}"])
        self.path, self.rows = folder / name, len(order)
        self.accuracy = float((matched[labelled] == cols["label"][labelled]).float().mean()) if labelled.any() else None
        sizes = torch.bincount(cols["cluster"], minlength=K).tolist()
        matching = matching.tolist() if labelled.any() else [-1] * K
        self.clusters = [(size, None if c < 0 else names[c] if names is not None and c < len(names) else str(c))
                         for size, c in zip(sizes, matching)]


def resume_command(argv: Sequence[str], program: str = "python -m lit_otclust") -> str:
    """The command line that resumes a fit from its ``last.ckpt``: ``argv`` as typed, with ``--ckpt_path last``.

    Args:
        argv: the arguments after the program, the subcommand first (``["fit", "--config", "a.yaml"]``); a
            ``--ckpt_path`` among them (``--ckpt_path X`` or ``--ckpt_path=X``) is replaced.
        program: how the command starts.

    Example:
        >>> resume_command(["fit", "--config", "my runs/a.yaml", "--ckpt_path", "x.ckpt", "--trainer.max_epochs=5"])
        "python -m lit_otclust fit --config 'my runs/a.yaml' --trainer.max_epochs=5 --ckpt_path last"
    """
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--ckpt_path":
            skip = True
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    return f"{program} {shlex.join([*kept, '--ckpt_path', 'last'])}"


class RunSummary(L.Callback):
    """What a run says when it ends, printed on global rank 0 after Lightning's own output.

    After ``fit`` (also when SIGTERM or Ctrl-C stopped it): the last and the best ``val/acc`` of the fitted
    samples, each with the NMI and ARI of its epoch and the epoch (0-based, as in ``metrics.csv``); where the
    checkpoints, the logged metrics, the figures and the W&B run are; the command that resumes the run
    (:func:`resume_command`). After ``predict``: the predictions file (:class:`ClusterWriter`), its rows and,
    where the samples have labels, the accuracy of their matched classes; each cluster's rows with the name of its
    matched class; the files the data module left out as unreadable (``skip_unreadable``), if any.

    The scores are the logged values, read when each evaluation ends, and live in this callback's state, so the
    best of a resumed run counts the epochs before the resume too.

    Args:
        command: the arguments the run was started with, subcommand first; None: no resume command is printed.
        program: how the command starts (``python -m lit_otclust`` or ``lit-otclust``).
    """

    KEYS = ("val/acc", "val/nmi", "val/ari")

    def __init__(self, command: Sequence[str] | None = None, program: str = "python -m lit_otclust") -> None:
        self.command = None if command is None else list(command)
        self.program = program
        self.last: dict[str, float] | None = None  # {"epoch", "val/acc", "val/nmi", "val/ari"} of the last evaluation
        self.best: dict[str, float] | None = None  # the same, of the first evaluation with the highest val/acc

    def state_dict(self) -> dict[str, Any]:
        return {"last": self.last, "best": self.best}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last, self.best = state_dict.get("last"), state_dict.get("best")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After the epoch's metrics reached callback_metrics (on_validation_epoch_end runs before the module logs).
        metrics = trainer.callback_metrics
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or "val/acc" not in metrics:
            return
        scores = {"epoch": trainer.current_epoch, **{key: float(metrics[key]) for key in self.KEYS if key in metrics}}
        self.last = scores
        if self.best is None or scores["val/acc"] > self.best["val/acc"]:
            self.best = scores

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._print(trainer, "fit finished", self._fit_lines(trainer))

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        # The stops a run resumes from (SignalCheckpoint saved last.ckpt just before); a failure prints its traceback.
        if trainer.state.fn == TrainerFn.FITTING and isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            self._print(trainer, "fit stopped", self._fit_lines(trainer))

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        lines = []
        for writer in (cb for cb in trainer.callbacks if isinstance(cb, ClusterWriter) and cb.path is not None):
            scored = "no labels" if writer.accuracy is None else f"matched accuracy {writer.accuracy:.4f}"
            share = "" if trainer.world_size == 1 else f", rank {trainer.global_rank}'s share: one file per rank"
            lines.append(("predictions", f"{writer.path} ({writer.rows} rows, {scored}{share})"))
            matched = any(name is not None for _, name in writer.clusters)
            sizes = ", ".join(f"{k}->{name or '-'}: {rows}" if matched else f"{k}: {rows}"
                              for k, (rows, name) in enumerate(writer.clusters))
            lines.append(("clusters", f"{sizes} ({'cluster->matched class' if matched else 'cluster'}: rows)"))
        unreadable = getattr(trainer.datamodule, "unreadable", None)
        if unreadable:  # skip_unreadable: files the data module left out
            lines.append(("unreadable", f"{len(unreadable)} files not predicted (listed in "
                                        f"{trainer.datamodule.unreadable_list})"))
        lines += self._figure_lines(trainer, predict=True)
        self._print(trainer, "predict finished", lines)

    def _fit_lines(self, trainer: L.Trainer) -> list[tuple[str, str]]:
        lines = []
        if self.last is None:
            lines.append(("val/acc", "not logged (no evaluation ran, or the fitted samples have no labels)"))
        else:
            for name, scores in (("last", self.last), ("best", self.best)):
                nmi, ari = scores.get("val/nmi", float("nan")), scores.get("val/ari", float("nan"))
                lines.append((f"{name} val/acc", f"{scores['val/acc']:.4f}  nmi {nmi:.4f}  ari {ari:.4f}  "
                                                 f"(epoch {scores['epoch']})"))
        checkpoint = next((cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath),
                          None)
        if checkpoint is not None:
            lines.append(("checkpoints", str(checkpoint.dirpath)))
        for logger in trainer.loggers:
            if isinstance(logger, CSVLogger):
                lines.append(("metrics", str(Path(logger.log_dir) / "metrics.csv")))
            # The run object, never `logger.experiment`, which would start a run that nothing was logged to.
            run = getattr(logger, "_experiment", None) if isinstance(logger, WandbLogger) else None
            if run is not None and run.offline:
                folder = Path(run.dir).parent
                lines.append(("W&B run", f"{folder} (offline; upload: wandb sync {folder})"))
            elif run is not None and run.url:  # WANDB_MODE=disabled makes a run without a page: no line
                lines.append(("W&B run", str(run.url)))
        lines += self._figure_lines(trainer)
        if self.command is not None and checkpoint is not None:
            lines.append(("resume", resume_command(self.command, self.program)))
        return lines

    @staticmethod
    def _figure_lines(trainer: L.Trainer, predict: bool = False) -> list[tuple[str, str]]:
        folder = Path(trainer.default_root_dir) / "figures"  # where ClusterFigures saves
        drew = any(cb.final or (not predict and cb.every_n_epochs > 0)
                   for cb in trainer.callbacks if isinstance(cb, ClusterFigures))
        return [("figures", str(folder))] if drew and folder.is_dir() else []

    @staticmethod
    def _print(trainer: L.Trainer, title: str, lines: list[tuple[str, str]]) -> None:
        if not trainer.is_global_zero or not lines:
            return
        width = max(len(name) for name, _ in lines)
        # print, as Lightning prints its validate table: the summary is the run's output, not a log record.
        print("\n".join([title, *(f"  {name:<{width}}  {text}" for name, text in lines)]), flush=True)
