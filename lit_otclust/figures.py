"""The :class:`ClusterFigures` callback: when the pictures of the clusters are drawn, and where they go.

It embeds the fitted images and draws the pictures of :mod:`lit_otclust.plots` (``FIGURE_NAMES``; ``plan`` for a
loss with a plan, joint phase only), saved as PNG (and to W&B when a ``WandbLogger`` is attached), with the confusion
counts also as CSV (:func:`lit_otclust.runfiles.confusion_csv`). Clusters appear in the same order in every picture:
those matched to class 0, 1, ... first, unmatched ones after. Classes are labelled by name where the data module
names them (``class_names``), else by number.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import NamedTuple

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from matplotlib.figure import Figure
from torch import Tensor

from lit_otclust.clustering import embed_samples
from lit_otclust.data import eval_batch_size
from lit_otclust.plots import (confusion_figure, display_images, embedding_figure, gallery_figure, matched_confusion,
                               nearest_to_centers, pca_2d, plan_figure, save_png, sizes_figure)
from lit_otclust.runfiles import confusion_csv
from lit_otclust.sinkhorn import squared_distances
from lit_otclust.wandb_run import ResumableWandbLogger

__all__ = ["ClusterFigures", "FIGURE_NAMES"]

FIGURE_NAMES = ("gallery", "confusion", "embedding", "sizes", "plan")


def _when(epoch: int | None) -> str:
    return "from a checkpoint" if epoch is None else f"epoch {epoch}"


class _Snapshot(NamedTuple):
    """What every picture of one state of the model is drawn from (on the CPU)."""

    x: Tensor  # (N, *input_shape) the fitted images
    y: Tensor  # (N,)
    z: Tensor  # (N, p)
    clusters: Tensor  # (N,)
    centers: Tensor  # (K, p)
    num_classes: int


class ClusterFigures(L.Callback):
    """Pictures of the clusters of the fitted images: galleries, confusion matrix, PCA map, sizes, Sinkhorn plan.

    Drawn into ``<default_root_dir>/figures/<name>_<tag>.png`` (and to W&B under ``figures/<name>``, with the
    cluster-size histograms ``val/cluster_sizes`` and ``heldout/cluster_sizes``). Only global rank 0 embeds and draws;
    the module is left as it was (train/eval modes restored, no parameter or buffer written).

    Args:
        every_n_epochs: draw after the validation of epochs ``n - 1, 2n - 1, ...``; 0 turns that off.
        final: draw at the end of fit and of predict; ``every_n_epochs=0, final=False``: no pictures at all.
        gallery_size: images per cluster in the gallery.
        max_points: embeddings in the PCA map (a seeded random subset when there are more).
    """

    def __init__(self, every_n_epochs: int = 10, final: bool = True, gallery_size: int = 8,
                 max_points: int = 5000) -> None:
        if every_n_epochs < 0:
            raise ValueError(f"every_n_epochs must be >= 0 (0: none while fitting), got {every_n_epochs}")
        if gallery_size < 1 or max_points < 1:
            raise ValueError(f"gallery_size and max_points must be >= 1, got {gallery_size} and {max_points}")
        self.every_n_epochs = every_n_epochs
        self.final = final
        self.gallery_size = gallery_size
        self.max_points = max_points
        self._last: tuple[int, dict[str, Path]] | None = None  # (global_step, files) of this fit's latest drawing

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for attr in ("embed", "assign", "centers", "proportions"):
            if not hasattr(pl_module, attr):
                raise AttributeError(f"ClusterFigures needs a module with `{attr}` (a DeepClustering); "
                                     f"{type(pl_module).__name__} has none")
        self._last = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After the whole evaluation, so the pictures show the centers it scored.
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or self.every_n_epochs == 0:
            return
        epoch = trainer.current_epoch
        if (epoch + 1) % self.every_n_epochs == 0:
            files = self.draw(trainer, pl_module, f"epoch{epoch:03d}", epoch)
            self._last = (trainer.global_step, files)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.final:
            return
        if self._last is not None and self._last[0] == trainer.global_step:
            # No step since the last drawing: the same pictures, so copy them instead of drawing (and logging) again.
            for name, path in self._last[1].items():
                shutil.copyfile(path, path.with_name(f"{name}_final.png"))
                if path.with_suffix(".csv").exists():
                    shutil.copyfile(path.with_suffix(".csv"), path.with_name(f"{name}_final.csv"))
            return
        self.draw(trainer, pl_module, "final", max(trainer.current_epoch - 1, 0))

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # predict restores the weights, not the loops: the epoch is unknown here.
        if self.final:
            self.draw(trainer, pl_module, "final", None)

    @torch.no_grad()
    def draw(self, trainer: L.Trainer, pl_module: L.LightningModule, tag: str, epoch: int | None) -> dict[str, Path]:
        """Draw every picture of the current model, save ``<name>_<tag>.png``, log to W&B; returns the files."""
        if not trainer.is_global_zero:
            return {}
        datamodule = trainer.datamodule
        fit_set = getattr(datamodule, "fit_set", None)
        if fit_set is None:
            rank_zero_warn("ClusterFigures draws the data module's `fit_set`; this run has none, so no figures")
            return {}
        wandb_loggers = [lg for lg in trainer.loggers
                         if isinstance(lg, WandbLogger) and not getattr(lg, "service_gone", False)]
        modes = {m: m.training for m in pl_module.modules()}
        pl_module.eval()  # e.g. BatchNorm must not update its running statistics here
        try:
            snap = self._snapshot(pl_module, fit_set, getattr(datamodule, "num_classes", None))
            figures, tables = self._draw(pl_module, snap, datamodule, epoch)
            heldout = getattr(datamodule, "heldout_set", None)
            heldout_sizes = (self._sizes(pl_module, heldout.x, len(snap.centers))
                             if wandb_loggers and heldout is not None and len(heldout) else None)
        finally:
            for m, training in modes.items():
                m.training = training
        folder = Path(trainer.default_root_dir) / "figures"
        files = {name: save_png(fig, folder / f"{name}_{tag}.png") for name, fig in figures.items()}
        for name, text in tables.items():  # the numbers behind a picture, beside it
            (folder / f"{name}_{tag}.csv").write_text(text)
        if wandb_loggers:
            import wandb

            def histogram(sizes: Tensor) -> wandb.Histogram:
                return wandb.Histogram(np_histogram=(sizes.numpy(), np.arange(len(sizes) + 1)))

            record = {f"figures/{name}": wandb.Image(str(path), caption=f"{name}, {_when(epoch)}")
                      for name, path in files.items()}
            record["val/cluster_sizes"] = histogram(torch.bincount(snap.clusters, minlength=len(snap.centers)))
            if heldout_sizes is not None:
                record["heldout/cluster_sizes"] = histogram(heldout_sizes)
            record.update({"epoch": epoch, "trainer/global_step": trainer.global_step})
            for logger in wandb_loggers:
                if isinstance(logger, ResumableWandbLogger):
                    logger.log_media(record)  # outlives a W&B service that a pre-emption ended
                else:
                    logger.experiment.log(record)
        return files

    def _embed(self, pl_module: L.LightningModule, x: Tensor, name: str) -> Tensor:
        """(N, p) embeddings of an evaluation set (``name``: ``val`` or ``heldout``), in order. When drawn right
        after an evaluation that embedded every sample, with no training step since, they are that evaluation's."""
        step, index, z = getattr(pl_module, "eval_embeddings", {}).get(name, (None, None, None))
        if step == pl_module.global_step and len(index) == len(x):
            index = index.to(z.device)
            if bool(torch.bincount(index, minlength=len(x)).eq(1).all()):  # each sample once (not a DDP shard)
                # On the module's device: at fit end Lightning's teardown has moved the module back to the CPU.
                return torch.empty_like(z).index_copy_(0, index, z).to(pl_module.device)
        return embed_samples(pl_module, x, eval_batch_size(pl_module.trainer.datamodule))

    def _sizes(self, pl_module: L.LightningModule, x: Tensor, num_clusters: int) -> Tensor:
        return torch.bincount(pl_module.assign(self._embed(pl_module, x, "heldout")).cpu(), minlength=num_clusters)

    def _snapshot(self, pl_module: L.LightningModule, fit_set, num_classes: int | None) -> _Snapshot:
        z = self._embed(pl_module, fit_set.x, "val")
        clusters = pl_module.assign(z).cpu()
        y = fit_set.y.long().cpu()
        num_classes = max(num_classes or 0, int(y.max()) + 1, 1)
        return _Snapshot(fit_set.x, y, z.float().cpu(), clusters, pl_module.centers.detach().float().cpu(), num_classes)

    def _draw(self, pl_module: L.LightningModule, snap: _Snapshot, datamodule,
              epoch: int | None) -> tuple[dict[str, Figure], dict[str, str]]:
        """The pictures by name, and the CSV text of those drawn from a table (the confusion counts)."""
        K, C, N = len(snap.centers), snap.num_classes, len(snap.y)
        labelled = bool((snap.y >= 0).all())  # a user's unlabelled images have y = -1: no class to match
        if labelled:
            matrix, order, matching = matched_confusion(snap.clusters, snap.y, K, C)
        else:
            order, matching = torch.arange(K), torch.full((K,), -1)
        names = getattr(datamodule, "class_names", None)  # e.g. an image folder's sub-folders

        def name(c: int) -> str:
            return names[c] if names is not None and 0 <= c < len(names) else str(c)

        labels = [f"{k}->{name(int(matching[k]))}" if matching[k] >= 0 else f"{k}->-" for k in order.tolist()]
        sizes = torch.bincount(snap.clusters, minlength=K).float() / N  # (K,)
        head = f"{_when(epoch)}, {N} samples" + (f", accuracy {matrix.diagonal().sum().item() / N:.3f}" if labelled else "")
        figures: dict[str, Figure] = {}
        tables: dict[str, str] = {}

        near = nearest_to_centers(snap.z, snap.centers, self.gallery_size)[order]  # (K, n)
        try:
            images = display_images(snap.x[near.flatten()])
        except ValueError:  # features (an array of embeddings), not images: no gallery, the other figures stand
            images = None
        if images is not None:
            images = images.reshape(*near.shape, *images.shape[1:])  # (K, n, H, W, 3)
            mismatch = (snap.y[near] != matching[order][:, None]).numpy() if labelled else None
            row_labels = [f"{lab}  {sizes[k]:.1%}" for lab, k in zip(labels, order.tolist())]
            figures["gallery"] = gallery_figure(images, row_labels, mismatch,
                                                f"{head}\nrows: cluster -> matched class, size; red: another class")

        if labelled:
            figures["confusion"] = confusion_figure(matrix, labels, [name(c) for c in range(C)], head)
            tables["confusion"] = confusion_csv(matrix, order, matching)

        keep = torch.randperm(N, generator=torch.Generator().manual_seed(0))[:self.max_points]
        points, centers = pca_2d(snap.z[keep], snap.centers)
        figures["embedding"] = embedding_figure(points, centers, snap.clusters[keep], snap.y[keep], K, C,
                                                f"{head}; PCA of {len(keep)} embeddings")

        w = pl_module.proportions.detach().float().cpu()
        figures["sizes"] = sizes_figure(sizes[order], w[order], labels, head)

        loss = getattr(pl_module, "loss", None) if getattr(pl_module, "joint", False) else None
        res = None
        if loss is not None:
            m = min(getattr(datamodule, "batch_size", 300), N)
            batch = torch.randperm(N, generator=torch.Generator().manual_seed(1))[:m]
            z_batch = snap.z[batch].to(pl_module.device, pl_module.dtype)
            res = loss.plan(z_batch, pl_module.centers, pl_module.proportions)
        if res is not None:  # a loss with a transport plan, in the joint phase
            # As train/plan_moved: the share the plan sends to another center than the nearest.
            nearest = squared_distances(z_batch, pl_module.centers.detach()).argmin(1)
            moved = (res.plan.argmax(1) != nearest).float().mean().item()
            state = "converged" if res.converged else "NOT converged"
            title = (f"Sinkhorn plan of a batch of {m}, {_when(epoch)}, epsilon {getattr(loss, 'epsilon', math.nan):.3g}\n"
                     f"{res.n_iter} iterations, {state} (marginal error {res.marginal_error:.1e}), "
                     f"{moved:.1%} sent off their nearest center")
            figures["plan"] = plan_figure(res.plan.cpu(), snap.clusters[batch], order, labels, title)
        return figures, tables
