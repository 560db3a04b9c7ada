"""Pictures of the clusters as plain functions: tensors in, matplotlib ``Figure`` out.

Built on the Agg canvas, never through ``pyplot``: no global figure registry, no GUI backend, nothing
to close by hand. The :class:`~lit_otclust.figures.ClusterFigures` callback decides when to draw.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from lit_otclust.metrics import hungarian_accuracy
from lit_otclust.sinkhorn import squared_distances

__all__ = ["display_images", "matched_confusion", "nearest_to_centers", "pca_2d", "gallery_figure", "confusion_figure",
           "embedding_figure", "sizes_figure", "plan_figure", "save_png"]


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
        ``(matrix, order, matching)``: ``matrix`` (K, C) long, whose row i counts the classes of cluster ``order[i]``;
        ``order`` (K,) puts the clusters matched to classes 0, 1, ... first (the matched counts on the diagonal),
        unmatched ones after; ``matching`` (K,) is each cluster's class, -1 if unmatched.
    """
    pred, target = pred.long().cpu(), target.long().cpu()
    matching = hungarian_accuracy(pred, target, num_clusters, num_classes)["matching"].cpu()  # (K,)
    counts = torch.bincount(pred * num_classes + target, minlength=num_clusters * num_classes)
    key = torch.where(matching >= 0, matching, num_classes + torch.arange(num_clusters))
    order = key.argsort()
    return counts.reshape(num_clusters, num_classes)[order], order, matching


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


# ---- drawing -----------------------------------------------------------------------------------
# Inches a character (mean width of DejaVu Sans, matplotlib's default font) and a line take at a font size.
_CHAR = {8: 0.07, 10: 0.09}
_LINE = {8: 0.16, 9: 0.18, 10: 0.2}


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _margins(fig: Figure, left: float, right: float, bottom: float, top: float, gap: float = 0.0) -> None:
    """Place the subplots ``left``, ``right``, ``bottom`` and ``top`` inches from the figure's edges, ``gap`` inches
    apart, sized from what they hold: constrained layout would measure every text in an extra drawing pass."""
    width, height = fig.get_size_inches()
    # The figure's own grid, not the one a colorbar splits its panel into.
    columns = max((ax.get_subplotspec().get_topmost_subplotspec().get_gridspec().ncols for ax in fig.axes
                   if ax.get_subplotspec()), default=1)
    cell = (width - left - right - gap * (columns - 1)) / columns
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        wspace=gap / cell if columns > 1 else None)


def _title(ax: Axes, title: str) -> None:
    # At y = 1, where automatic placement puts it without tick labels above the axes, but without measuring them.
    ax.set_title(title, fontsize=9, y=1.0)


def _title_height(title: str, size: int = 9) -> float:
    return (title.count("\n") + 1) * _LINE[size] + 0.12 if title else 0.1


def _tick_width(labels: list[str], size: int = 8) -> float:
    return max(map(len, labels), default=0) * _CHAR[size] + 0.12


def _crowded(labels: list[str], slot: float, size: int = 8) -> bool:
    """Whether tick labels ``slot`` inches apart would run into each other written across: then they stand upright."""
    return max(map(len, labels), default=0) * _CHAR[size] > slot - 0.05


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
    upright = _crowded(col_labels, 0.45)  # class names (e.g. CIFAR-10's "automobile") wider than a column
    ax.set_xticks(range(cols), col_labels, fontsize=8, rotation=90 if upright else 0)
    ax.set_yticks(range(rows), row_labels, fontsize=8)
    ax.set_xlabel("class")
    ax.set_ylabel("cluster -> matched class")
    _title(ax, title)
    fig.colorbar(im, ax=ax, shrink=0.8)
    # The colorbar of a tall matrix is wide (its width follows its height) and leaves its tick labels no room.
    _margins(fig, left=_tick_width(row_labels) + _LINE[10] + 0.1, right=len(str(int(m.max()))) * _CHAR[10] + 0.2,
             bottom=_tick_width(col_labels) + _LINE[10] + 0.15 if upright else _LINE[8] + _LINE[10] + 0.25,
             top=_title_height(title))
    return fig


def embedding_figure(points: Tensor, centers: Tensor, clusters: Tensor, labels: Tensor, num_clusters: int,
                     num_classes: int, title: str = "") -> Figure:
    """Two scatter panels of 2-D ``points`` (n, 2): coloured by cluster and by class; centers (K, 2) as crosses."""
    p, c = points.numpy(), centers.numpy()
    fig = _figure(11, 5)
    by_cluster, by_class = fig.subplots(1, 2, sharex=True, sharey=True)
    for ax, colour, n, name in ((by_cluster, clusters, num_clusters, "cluster"), (by_class, labels, num_classes, "class")):
        cmap = "tab10" if n <= 10 else "tab20" if n <= 20 else "turbo"
        sc = ax.scatter(p[:, 0], p[:, 1], c=colour.numpy(), cmap=cmap, vmin=-0.5, vmax=n - 0.5, s=3,
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
    upright = k > 20 or _crowded(labels, 0.45)
    ax.set_xticks(range(k), labels, fontsize=8, rotation=90 if upright else 0)
    ax.set_xlabel("cluster -> matched class")
    ax.set_ylabel("fraction of the samples")
    ax.legend(fontsize=8)
    _title(ax, title)
    _margins(fig, left=4 * _CHAR[10] + _LINE[10] + 0.25, right=0.15,
             bottom=(_tick_width(labels) if upright else _LINE[8] + 0.1) + _LINE[10] + 0.15, top=_title_height(title))
    return fig


def plan_figure(plan: Tensor, clusters: Tensor, order: Tensor, col_labels: list[str], title: str = "") -> Figure:
    """The plan (m, K) scaled by m (each row sums to 1), rows grouped by cluster and columns in ``order``."""
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))  # display position of each cluster
    rows = rank[clusters].argsort(stable=True)
    image = (plan[rows][:, order] * len(plan)).cpu().numpy()  # (m, K)
    width = max(7.5, 1.8 + 0.4 * plan.shape[1])
    fig = _figure(width, 5)
    ax = fig.add_subplot()
    im = ax.imshow(image, aspect="auto", cmap="magma", interpolation="nearest", vmin=0, vmax=1)
    bounds = torch.bincount(rank[clusters], minlength=len(order)).cumsum(0)[:-1]
    for b in bounds.tolist():
        ax.axhline(b - 0.5, color="white", linewidth=0.4, alpha=0.6)
    # A column's share of the axes, about 80% of the figure's width less the margins.
    rotated = len(order) > 20 or _crowded(col_labels, 0.8 * (width - 1.0) / len(order))
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
