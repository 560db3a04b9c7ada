"""Pictures of the clusters: plain drawing functions and the :class:`ClusterFigures` callback.

The functions take tensors and return matplotlib ``Figure`` objects built on the Agg canvas, never
through ``pyplot``: no global figure registry, no GUI backend, nothing to close by hand (a figure
is freed with its last reference). The callback embeds the fitted images, draws

- ``gallery``: per cluster, the images nearest its center, one row per cluster;
- ``confusion``: clusters x classes counts, rows ordered by the Hungarian-matched class;
- ``embedding``: a 2-D PCA of the embeddings and centers, coloured by cluster and by class;
- ``sizes``: the cluster sizes against the prescribed proportions w;
- ``plan``: the Sinkhorn plan of one training batch (OT clustering, joint phase only);

and saves them as PNG (and to W&B when a ``WandbLogger`` is attached), with the confusion counts
also as CSV (``confusion_<tag>.csv``, :func:`confusion_csv`), so how classes merge and split over
the epochs can be read back as numbers. Clusters appear in the same order in every picture: those
matched to class 0, 1, ... first, unmatched ones after.
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
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from lit_otclust.clustering import embed_samples
from lit_otclust.data import eval_batch_size
from lit_otclust.metrics import hungarian_accuracy
from lit_otclust.sinkhorn import SinkhornResult, sinkhorn, squared_distances

__all__ = ["display_images", "matched_confusion", "confusion_csv", "read_confusion_csv", "nearest_to_centers",
           "pca_2d", "batch_plan", "gallery_figure", "confusion_figure", "embedding_figure", "sizes_figure",
           "plan_figure", "save_png", "ClusterFigures"]

FIGURE_NAMES = ("gallery", "confusion", "embedding", "sizes", "plan")


# ---- computations ------------------------------------------------------------------------------
def display_images(x: Tensor) -> np.ndarray:
    """Images as RGB floats (N, H, W, 3) in [0, 1], each min-max normalised on its own.

    Accepts (N, H, W), (N, 1, H, W), (N, 3, H, W), and flattened square images (N, H*W) or
    (N, 3*H*W) (MNIST's (N, 784) reads as 28 x 28), whether scaled to [0, 1] or z-scored.
    """
    x = x.detach().float().cpu()
    n = len(x)
    if x.dim() == 2:
        d = x.shape[1]
        for channels in (1, 3):
            side = math.isqrt(d // channels)
            if channels * side * side == d:
                x = x.reshape(n, channels, side, side)
                break
        else:
            raise ValueError(f"cannot show flat samples of {d} values as square images (1 or 3 channels)")
    if x.dim() == 3:
        x = x[:, None]
    if x.dim() != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f"expected images (N, H, W), (N, 1|3, H, W) or flattened squares, got {tuple(x.shape)}")
    lo, hi = x.amin((1, 2, 3), keepdim=True), x.amax((1, 2, 3), keepdim=True)
    x = (x - lo) / (hi - lo).clamp_min(1e-12)  # a constant image shows black, not NaN
    return x.expand(-1, 3, -1, -1).permute(0, 2, 3, 1).numpy()  # (N, H, W, 3)


def matched_confusion(pred: Tensor, target: Tensor, num_clusters: int,
                      num_classes: int) -> tuple[Tensor, Tensor, Tensor]:
    """Cluster x class counts with the rows ordered by the Hungarian matching.

    Args:
        pred: (N,) clusters in [0, K). target: (N,) classes in [0, C).

    Returns:
        ``(matrix, order, matching)``: ``matrix`` (K, C) long, whose row i counts the classes of
        cluster ``order[i]``; ``order`` (K,) puts the clusters matched to classes 0, 1, ... first
        (so the matched counts lie on the diagonal, and their sum over N is the Hungarian
        accuracy), unmatched clusters after, by index; ``matching`` (K,) is each cluster's class,
        -1 if unmatched (:func:`lit_otclust.metrics.hungarian_accuracy`).
    """
    pred, target = pred.long().cpu(), target.long().cpu()
    matching = hungarian_accuracy(pred, target, num_clusters, num_classes)["matching"].cpu()  # (K,)
    counts = torch.bincount(pred * num_classes + target, minlength=num_clusters * num_classes)
    key = torch.where(matching >= 0, matching, num_classes + torch.arange(num_clusters))
    order = key.argsort()
    return counts.reshape(num_clusters, num_classes)[order], order, matching


def confusion_csv(matrix: Tensor, order: Tensor, matching: Tensor) -> str:
    """The output of :func:`matched_confusion` as CSV text: a header ``cluster,matched_class,0,1,...,C-1``, then
    one row per cluster in ``order`` (its index, its matched class or -1, its counts per class)."""
    num_classes = matrix.shape[1]
    lines = [",".join(["cluster", "matched_class", *map(str, range(num_classes))])]
    for k, counts in zip(order.tolist(), matrix.tolist()):
        lines.append(",".join(map(str, [k, int(matching[k]), *counts])))
    return "\n".join(lines) + "\n"


def read_confusion_csv(path: Path) -> dict[str, list]:
    """A file written from :func:`confusion_csv`: ``{"cluster": (K,), "matched_class": (K,), "counts": (K, C)}``."""
    header, *rows = [line.split(",") for line in Path(path).read_text().splitlines() if line]
    if header[:2] != ["cluster", "matched_class"]:
        raise ValueError(f"{path}: not a confusion CSV (header {header[:2]})")
    table = [[int(v) for v in row] for row in rows]
    return {"cluster": [r[0] for r in table], "matched_class": [r[1] for r in table], "counts": [r[2:] for r in table]}


def nearest_to_centers(z: Tensor, centers: Tensor, n: int) -> Tensor:
    """Indices (K, min(n, N)) of the embeddings nearest each center, nearest first."""
    dist = squared_distances(z, centers)  # (N, K)
    return dist.topk(min(n, len(z)), dim=0, largest=False).indices.T


def pca_2d(z: Tensor, *others: Tensor) -> list[Tensor]:
    """Projections (n, 2) of ``z`` and of ``others`` (e.g. the centers) on z's first two principal axes.

    Exact (an SVD of the centred (n, p) matrix, p is small); each axis' sign is fixed so that its
    largest loading is positive, which keeps the picture from flipping between epochs. A 1-D
    embedding gets a zero second coordinate.
    """
    z = z.detach().double().cpu()
    mean = z.mean(0)
    _, _, vh = torch.linalg.svd(z - mean, full_matrices=False)  # vh (min(n, p), p)
    basis = vh[:2].T  # (p, <=2)
    sign = torch.sign(basis.gather(0, basis.abs().argmax(0, keepdim=True)))
    basis = basis * torch.where(sign == 0, 1.0, sign)
    if basis.shape[1] < 2:
        basis = torch.cat([basis, basis.new_zeros(basis.shape[0], 2 - basis.shape[1])], 1)
    return [((t.detach().double().cpu() - mean) @ basis).float() for t in (z, *others)]


def batch_plan(model: L.LightningModule, z: Tensor) -> SinkhornResult:
    """The Sinkhorn plan (m, K) of a batch of embeddings ``z`` (m, p), as the model's OT loss solves it.

    Same problem as :meth:`DeepClustering.clustering_loss`: cost ``||z - mu||^2`` (divided by its
    mean under ``cost_scale='batch_mean'``), row weights 1/m, column weights ``model.proportions``,
    and the current ``model.schedule()`` (epsilon, reg_m); no warm start, and no warning: the
    figure's title says whether it converged.
    """
    hp = model.hparams
    epsilon, reg_m = model.schedule()
    cost = squared_distances(z, model.centers.detach())  # (m, K)
    if hp.get("cost_scale", "none") == "batch_mean":
        cost = cost / cost.mean()
    return sinkhorn(cost, b=model.proportions, epsilon=epsilon, reg_m=reg_m, max_iter=hp.get("sinkhorn_max_iter", 1000),
                    tol=hp.get("sinkhorn_tol", 1e-5), warn=False)


# ---- drawing -----------------------------------------------------------------------------------
def _when(epoch: int | None) -> str:
    return "from a checkpoint" if epoch is None else f"epoch {epoch}"


# Inches a character (mean width of DejaVu Sans, matplotlib's default font) and a line take at a font size.
_CHAR = {8: 0.07, 10: 0.09}
_LINE = {8: 0.16, 9: 0.18, 10: 0.2}


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _margins(fig: Figure, left: float, right: float, bottom: float, top: float, gap: float = 0.0) -> None:
    """Place the subplots ``left``, ``right``, ``bottom`` and ``top`` inches from the figure's edges, ``gap`` inches
    apart side by side, with each drawing sizing its margins from what they hold (tick labels' characters, title
    lines). matplotlib's constrained layout measures every text in an extra drawing pass instead: a drawing of four
    MNIST pictures took 0.60-0.62 s with it, 0.38-0.40 s without
    (``benchmarks/results/bench_figures_margins_2026-11-26.txt``).
    A colorbar's slot (15% of its panel) holds its own ticks and label."""
    width, height = fig.get_size_inches()
    # The figure's own grid, not the one a colorbar splits its panel into.
    columns = max((ax.get_subplotspec().get_topmost_subplotspec().get_gridspec().ncols for ax in fig.axes
                   if ax.get_subplotspec()), default=1)
    cell = (width - left - right - gap * (columns - 1)) / columns
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        wspace=gap / cell if columns > 1 else None)


def _title(ax: Axes, title: str) -> None:
    # At the axes' top (y = 1), where matplotlib's automatic placement puts it when no tick labels are above the
    # axes (none of these pictures has any): that placement measures every tick label on each drawing. The same
    # pixels (the four MNIST pictures compared); with save_png's compression level a drawing of them took
    # 0.35-0.36 s instead of 0.39-0.40 (benchmarks/results/bench_figures_title_png_2026-11-26.txt).
    ax.set_title(title, fontsize=9, y=1.0)


def _title_height(title: str, size: int = 9) -> float:
    return (title.count("\n") + 1) * _LINE[size] + 0.12 if title else 0.1


def _tick_width(labels: list[str], size: int = 8) -> float:
    return max(map(len, labels), default=0) * _CHAR[size] + 0.12


def _colormap(n: int) -> str:
    return "tab10" if n <= 10 else "tab20" if n <= 20 else "turbo"


def gallery_figure(images: np.ndarray, row_labels: list[str], mismatch: np.ndarray | None = None,
                   title: str = "") -> Figure:
    """A mosaic of ``images`` (rows, cols, H, W, 3) in [0, 1], one labelled row per cluster.

    ``mismatch`` (rows, cols) bool frames an image in red (e.g. its class is not its cluster's class).
    """
    rows, cols, h, w, _ = images.shape
    pad = max(1, h // 14)
    ch, cw = h + 2 * pad, w + 2 * pad
    mosaic = np.ones((rows * ch, cols * cw, 3))
    for r in range(rows):
        for c in range(cols):
            if mismatch is not None and mismatch[r, c]:
                mosaic[r * ch:(r + 1) * ch, c * cw:(c + 1) * cw] = (0.85, 0.1, 0.1)
            mosaic[r * ch + pad:r * ch + pad + h, c * cw + pad:c * cw + pad + w] = images[r, c]
    fig = _figure(1.2 + 0.55 * cols + 0.07 * max(map(len, row_labels), default=0), 0.6 + 0.55 * rows)
    ax = fig.add_subplot()
    ax.imshow(mosaic, interpolation="nearest")
    ax.set_yticks([r * ch + ch / 2 for r in range(rows)], row_labels, fontsize=8)
    ax.set_xticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    _title(ax, title)
    _margins(fig, left=_tick_width(row_labels), right=0.1, bottom=0.1, top=_title_height(title))
    return fig


def confusion_figure(matrix: Tensor, row_labels: list[str], col_labels: list[str], title: str = "") -> Figure:
    """Heatmap of counts (K, C) with each count written in its cell (up to 400 cells)."""
    m = matrix.cpu().numpy()
    rows, cols = m.shape
    fig = _figure(1.8 + 0.45 * cols, 1.2 + 0.4 * rows)
    ax = fig.add_subplot()
    im = ax.imshow(m, cmap="Blues", aspect="auto", interpolation="nearest")
    if m.size <= 400:
        for (i, j), v in np.ndenumerate(m):
            ax.text(j, i, str(v), ha="center", va="center", fontsize=7, color="white" if v > m.max() / 2 else "black")
    ax.set_xticks(range(cols), col_labels, fontsize=8)
    ax.set_yticks(range(rows), row_labels, fontsize=8)
    ax.set_xlabel("class")
    ax.set_ylabel("cluster -> matched class")
    _title(ax, title)
    fig.colorbar(im, ax=ax, shrink=0.8)
    # The colorbar of a tall matrix is wide (its width follows its height) and leaves its tick labels no room.
    _margins(fig, left=_tick_width(row_labels) + _LINE[10] + 0.1, right=len(str(int(m.max()))) * _CHAR[10] + 0.2,
             bottom=_LINE[8] + _LINE[10] + 0.25, top=_title_height(title))
    return fig


def embedding_figure(points: Tensor, centers: Tensor, clusters: Tensor, labels: Tensor, num_clusters: int,
                     num_classes: int, title: str = "") -> Figure:
    """Two scatter panels of 2-D ``points`` (n, 2): coloured by cluster and by class; centers (K, 2) as crosses."""
    p, c = points.numpy(), centers.numpy()
    fig = _figure(11, 5)
    by_cluster, by_class = fig.subplots(1, 2, sharex=True, sharey=True)
    for ax, colour, n, name in ((by_cluster, clusters, num_clusters, "cluster"), (by_class, labels, num_classes, "class")):
        sc = ax.scatter(p[:, 0], p[:, 1], c=colour.numpy(), cmap=_colormap(n), vmin=-0.5, vmax=n - 0.5, s=3,
                        alpha=0.6, linewidths=0, rasterized=True)
        ax.scatter(c[:, 0], c[:, 1], marker="X", s=90, c="black", edgecolors="white", linewidths=0.8)
        for k, (x, y) in enumerate(c):
            ax.annotate(str(k), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8, weight="bold")
        _title(ax, f"coloured by {name}")
        ax.set_xlabel("PC 1")
        if n <= 20:
            fig.colorbar(sc, ax=ax, ticks=range(n), shrink=0.8, label=name)
    by_cluster.set_ylabel("PC 2")
    fig.suptitle(title, fontsize=9)
    # Left of the axes, tick labels such as "-10" (4 characters at size 10); the right panel shares them.
    _margins(fig, left=4 * _CHAR[10] + _LINE[10] + 0.2, right=0.15, bottom=_LINE[10] * 2 + 0.2,
             top=_title_height(title) + _LINE[9] + 0.1, gap=0.3)
    return fig


def sizes_figure(sizes: Tensor, proportions: Tensor, labels: list[str], title: str = "") -> Figure:
    """Bars of the cluster sizes (fractions, K) with the prescribed proportions w (K) as markers."""
    k = len(sizes)
    fig = _figure(1.5 + 0.45 * k, 3.5)
    ax = fig.add_subplot()
    ax.bar(range(k), sizes.numpy(), color="tab:blue", alpha=0.8, label="cluster size")
    ax.scatter(range(k), proportions.numpy(), marker="_", s=400, color="tab:red", linewidths=2, label="prescribed w",
               zorder=3)
    ax.set_xticks(range(k), labels, fontsize=8, rotation=90 if k > 20 else 0)
    ax.set_xlabel("cluster -> matched class")
    ax.set_ylabel("fraction of the samples")
    ax.legend(fontsize=8)
    _title(ax, title)
    _margins(fig, left=4 * _CHAR[10] + _LINE[10] + 0.25, right=0.15,
             bottom=(_tick_width(labels) if k > 20 else _LINE[8] + 0.1) + _LINE[10] + 0.15, top=_title_height(title))
    return fig


def plan_figure(plan: Tensor, clusters: Tensor, order: Tensor, col_labels: list[str], title: str = "") -> Figure:
    """The plan (m, K) scaled by m (each row sums to 1), rows grouped by cluster and columns in ``order``."""
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))  # display position of each cluster
    rows = rank[clusters].argsort(stable=True)
    image = (plan[rows][:, order] * len(plan)).cpu().numpy()  # (m, K)
    fig = _figure(max(7.5, 1.8 + 0.4 * plan.shape[1]), 5)
    ax = fig.add_subplot()
    im = ax.imshow(image, aspect="auto", cmap="magma", interpolation="nearest", vmin=0, vmax=1)
    bounds = torch.bincount(rank[clusters], minlength=len(order)).cumsum(0)[:-1]
    for b in bounds.tolist():
        ax.axhline(b - 0.5, color="white", linewidth=0.4, alpha=0.6)
    rotated = len(order) > 20
    ax.set_xticks(range(len(order)), col_labels, fontsize=8, rotation=90 if rotated else 0)
    ax.set_xlabel("cluster -> matched class")
    ax.set_ylabel("batch samples, grouped by their cluster")
    _title(ax, title)
    fig.colorbar(im, ax=ax, shrink=0.8, label="m * P (rows sum to 1)")
    _margins(fig, left=len(str(len(plan))) * _CHAR[10] + _LINE[10] + 0.25, right=0.15,
             bottom=(_tick_width(col_labels) if rotated else _LINE[8] + 0.1) + _LINE[10] + 0.15,
             top=_title_height(title))
    return fig


def save_png(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # zlib level 1 instead of PIL's default 6: faster to encode, the files a little larger.
    fig.savefig(path, dpi=100, pil_kwargs={"compress_level": 1})
    return path


# ---- the callback ------------------------------------------------------------------------------
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

    When: at the end of every ``every_n_epochs``-th validation while fitting (0: never), and, with
    ``final``, at the end of fit (``<name>_final.png``, a copy of the last drawing when nothing
    trained since) and at the end of predict. Where: ``<default_root_dir>/figures/<name>_epochNNN.png``, and, with a
    ``WandbLogger``, as ``wandb.Image`` under ``figures/<name>`` together with the cluster-size
    histograms ``val/cluster_sizes`` (fitted samples) and ``heldout/cluster_sizes``. Only global
    rank 0 embeds and draws; the module is left as it was (its train/eval modes restored, no
    parameter or buffer written).

    Args:
        every_n_epochs: draw after the validation of epochs ``n - 1, 2n - 1, ...``; 0 turns that off.
        final: draw at the end of fit and of predict; ``every_n_epochs=0, final=False``: no pictures at all
            (e.g. a sweep of many short runs, where the end's drawing is a visible share of each).
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
        # After the whole evaluation, so the pictures show the centers it scored (while pre-training, the
        # k-means centers PhaseSwitch fits at its start).
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
        wandb_runs = [lg.experiment for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        modes = {m: m.training for m in pl_module.modules()}
        pl_module.eval()  # e.g. BatchNorm must not update its running statistics here
        try:
            snap = self._snapshot(pl_module, fit_set, getattr(datamodule, "num_classes", None))
            figures, tables = self._draw(pl_module, snap, datamodule, epoch)
            heldout = getattr(datamodule, "heldout_set", None)
            heldout_sizes = (self._sizes(pl_module, heldout.x, len(snap.centers))
                             if wandb_runs and heldout is not None and len(heldout) else None)
        finally:
            for m, training in modes.items():
                m.training = training
        folder = Path(trainer.default_root_dir) / "figures"
        files = {name: save_png(fig, folder / f"{name}_{tag}.png") for name, fig in figures.items()}
        for name, text in tables.items():  # the numbers behind a picture, beside it
            (folder / f"{name}_{tag}.csv").write_text(text)
        if wandb_runs:
            import wandb

            def histogram(sizes: Tensor) -> wandb.Histogram:
                return wandb.Histogram(np_histogram=(sizes.numpy(), np.arange(len(sizes) + 1)))

            record = {f"figures/{name}": wandb.Image(str(path), caption=f"{name}, {_when(epoch)}")
                      for name, path in files.items()}
            record["val/cluster_sizes"] = histogram(torch.bincount(snap.clusters, minlength=len(snap.centers)))
            if heldout_sizes is not None:
                record["heldout/cluster_sizes"] = histogram(heldout_sizes)
            for run in wandb_runs:
                run.log({**record, "epoch": epoch, "trainer/global_step": trainer.global_step})
        return files

    def _embed(self, pl_module: L.LightningModule, x: Tensor, name: str) -> Tensor:
        """(N, p) embeddings of an evaluation set (``name``: ``val`` or ``heldout``), in order. When drawn right
        after an evaluation that embedded every sample, with no training step since, they are that evaluation's."""
        step, index, z = getattr(pl_module, "eval_embeddings", {}).get(name, (None, None, None))
        if step == pl_module.global_step and len(index) == len(x):
            index = index.to(z.device)
            if bool(torch.bincount(index, minlength=len(x)).eq(1).all()):  # each sample once (not a DDP shard)
                # On the module's device: at fit end Lightning's teardown has moved the module back to the CPU,
                # while the evaluation left these on the GPU (a GPU fit's final pictures crashed on that).
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
        labels = [f"{k}->{int(matching[k])}" if matching[k] >= 0 else f"{k}->-" for k in order.tolist()]
        sizes = torch.bincount(snap.clusters, minlength=K).float() / N  # (K,)
        head = f"{_when(epoch)}, {N} samples" + (f", accuracy {matrix.diagonal().sum().item() / N:.3f}" if labelled else "")
        figures: dict[str, Figure] = {}
        tables: dict[str, str] = {}

        near = nearest_to_centers(snap.z, snap.centers, self.gallery_size)[order]  # (K, n)
        images = display_images(snap.x[near.flatten()])
        images = images.reshape(*near.shape, *images.shape[1:])  # (K, n, H, W, 3)
        mismatch = (snap.y[near] != matching[order][:, None]).numpy() if labelled else None
        row_labels = [f"{lab}  {sizes[k]:.1%}" for lab, k in zip(labels, order.tolist())]
        figures["gallery"] = gallery_figure(images, row_labels, mismatch,
                                            f"{head}\nrows: cluster -> matched class, size; red: another class")

        if labelled:
            figures["confusion"] = confusion_figure(matrix, labels, [str(c) for c in range(C)], head)
            tables["confusion"] = confusion_csv(matrix, order, matching)

        keep = torch.randperm(N, generator=torch.Generator().manual_seed(0))[:self.max_points]
        points, centers = pca_2d(snap.z[keep], snap.centers)
        figures["embedding"] = embedding_figure(points, centers, snap.clusters[keep], snap.y[keep], K, C,
                                                f"{head}; PCA of {len(keep)} embeddings")

        w = pl_module.proportions.detach().float().cpu()
        figures["sizes"] = sizes_figure(sizes[order], w[order], labels, head)

        if pl_module.hparams.get("clustering") == "ot" and getattr(pl_module, "joint", False):
            m = min(getattr(datamodule, "batch_size", 300), N)
            batch = torch.randperm(N, generator=torch.Generator().manual_seed(1))[:m]
            z_batch = snap.z[batch].to(pl_module.device, pl_module.dtype)
            res = batch_plan(pl_module, z_batch)
            # As train/plan_moved: the share the plan sends to another center than the nearest.
            nearest = squared_distances(z_batch, pl_module.centers.detach()).argmin(1)
            moved = (res.plan.argmax(1) != nearest).float().mean().item()
            state = "converged" if res.converged else "NOT converged"
            title = (f"Sinkhorn plan of a batch of {m}, {_when(epoch)}, epsilon {pl_module.schedule()[0]:.3g}\n"
                     f"{res.n_iter} iterations, {state} (marginal error {res.marginal_error:.1e}), "
                     f"{moved:.1%} sent off their nearest center")
            figures["plan"] = plan_figure(res.plan.cpu(), snap.clusters[batch], order, labels, title)
        return figures, tables
