"""Callbacks that write a run's outputs: a per-sample prediction writer, and the summary a run prints when it ends.
The phase switch of the paper's algorithm is :mod:`lit_otclust.phases`."""

from __future__ import annotations

import csv
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_otclust.figures import ClusterFigures
from lit_otclust.metrics import hungarian_accuracy

class ClusterWriter(BasePredictionWriter):
    """Writes ``predictions.csv`` (one row per sample: index, cluster, label, matched class, distance).

    The matched class is each cluster's class under the Hungarian matching on the predicted samples' labels. Under DDP
    each rank writes ``predictions-rank{R}.csv`` with its own matching. Where the dataset has ``paths`` (an image
    folder), a ``file`` column names each sample's file; where the data module names its classes (``class_names``),
    ``label_name`` and ``matched_class_name`` follow ``label`` and ``matched_class``. A sample without a label gets
    empty label and matched-class cells. ``path``, ``rows``, ``accuracy`` and ``clusters`` say what was written.

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

    After ``fit`` (also when SIGTERM or Ctrl-C stopped it): the last and the best ``val/acc`` with the NMI, ARI and
    epoch; where the checkpoints, metrics, figures and W&B run are; the resume command (:func:`resume_command`). After
    ``predict``: the predictions file (:class:`ClusterWriter`), its rows, matched accuracy and clusters, and the files
    left out as unreadable. The scores live in this callback's state, so a resumed run's best counts earlier epochs.

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
