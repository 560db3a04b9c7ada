"""Which samples a data module keeps: seeded stratified subsets and class-proportional subsamples.

Plain torch, no Lightning: a draw depends only on the labels, the sizes and the seed, so the same
settings give the same samples on every machine and every rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor


def stratified_indices(labels: Tensor, size: int, seed: int) -> Tensor:
    """Draw ``size`` sample positions with classes as equal in number as the data allow.

    The quotas fill classes from the smallest up with :math:`q_c = \\min(n_c, \\lceil r / k \\rceil)`, :math:`r` the
    samples still to draw and :math:`k` the classes still to serve: classes with enough samples differ by at most one,
    and a class too small for its share gives all it has.

    Args:
        labels: class of each sample, shape (N,), int64, values in [0, K).
        size: number of positions to draw, 1 <= size <= N.
        seed: seed of the draw; the same (labels, size, seed) always gives the same positions.

    Returns:
        Sorted positions, shape (size,), int64, without repeats.
    """
    if not 1 <= size <= len(labels):
        raise ValueError(f"size={size} must lie in [1, {len(labels)}]")
    counts = torch.bincount(labels)  # (K,)
    generator = torch.Generator().manual_seed(seed)
    remaining = size
    chosen = []
    order = torch.argsort(counts, stable=True).tolist()
    for served, label in enumerate(order):
        left = len(order) - served
        quota = min(int(counts[label]), -(-remaining // left))  # ceil: extras go to early classes
        members = torch.nonzero(labels == label).squeeze(1)  # (n_c,)
        chosen.append(members[torch.randperm(len(members), generator=generator)[:quota]])
        remaining -= quota
    return torch.sort(torch.cat(chosen)).values


def geometric_proportions(num_classes: int, ratio: float) -> list[float]:
    """Class proportions decreasing geometrically from class 0 to class C - 1 with ``w_0 / w_{C-1} = ratio``.

    .. math::
        w_c = \\frac{r^{-c / (C - 1)}}{\\sum_{j=0}^{C-1} r^{-j / (C - 1)}}, \\qquad c = 0, \\dots, C - 1,

    the usual long-tailed version of a balanced data set. ``ratio = 1`` gives uniform proportions.

    Args:
        num_classes: C >= 2.
        ratio: r >= 1, the largest proportion over the smallest.

    Returns:
        C floats summing to 1 (to rounding), for ``data.class_proportions`` and ``model.proportions``.

    Example:
        >>> [round(w, 4) for w in geometric_proportions(3, 4.0)]
        [0.5714, 0.2857, 0.1429]
    """
    if num_classes < 2:
        raise ValueError(f"num_classes={num_classes} must be at least 2")
    if not (math.isfinite(ratio) and ratio >= 1):
        raise ValueError(f"ratio={ratio!r} must be a finite number >= 1 (largest class over smallest)")
    weights = [ratio ** (-c / (num_classes - 1)) for c in range(num_classes)]
    total = math.fsum(weights)
    return [w / total for w in weights]


def check_class_proportions(proportions: Sequence[float], num_classes: int | None = None) -> list[float]:
    """Validate ``class_proportions`` (finite, >= 0, summing to 1 within 1e-6, one per class) and return them as floats."""
    values = [float(w) for w in proportions]
    if not all(math.isfinite(w) and w >= 0 for w in values) or abs(math.fsum(values) - 1.0) > 1e-6:
        raise ValueError(f"class_proportions must be finite, non-negative and sum to 1 (within 1e-6), got {values}; "
                         f"lit_otclust.data.geometric_proportions(num_classes, ratio) gives a long-tailed set")
    if num_classes is not None and len(values) != num_classes:
        raise ValueError(f"class_proportions has {len(values)} entries but the data have {num_classes} classes")
    return values


def proportional_counts(counts: Tensor, proportions: Sequence[float], size: int | None = None) -> Tensor:
    """How many samples of each class to keep so that the classes follow ``proportions``.

    With ``size=None``, the largest sample the classes allow: with :math:`n_c` samples of class :math:`c` and
    proportion :math:`w_c`, the total is :math:`s = \\min_{c : w_c > 0} n_c / w_c` and class :math:`c` keeps
    :math:`\\lfloor w_c s \\rfloor`, so the class that runs out first keeps all its samples. With ``size``, exactly that
    many: :math:`\\lfloor w_c \\, size \\rfloor` each, the remainder one by one to the largest fractional parts.

    Args:
        counts: samples available per class, shape (C,), int64.
        proportions: w, C non-negative weights summing to 1.
        size: the total to keep, or None for the largest possible.

    Returns:
        Per-class counts, shape (C,), int64, each at most ``counts``.

    Raises:
        ValueError: a class with a positive proportion has no samples, or ``size`` asks a class for
            more samples than it has (the message names the class and the largest possible size).
    """
    w = torch.tensor(list(proportions), dtype=torch.float64)  # (C,)
    n = counts.to(torch.float64)  # (C,)
    if len(w) != len(n):
        raise ValueError(f"{len(w)} proportions for {len(n)} classes")
    used = w > 0
    if (n[used] == 0).any():
        empty = torch.nonzero(used & (n == 0)).flatten().tolist()
        raise ValueError(f"class(es) {empty} have no samples but a positive class proportion")
    # The classes that bind first keep all their samples; the 1e-6 absorbs n_c / w_c * w_c rounding below n_c.
    largest = torch.floor(w * (n[used] / w[used]).min() + 1e-6).long().minimum(counts)  # (C,)
    if size is None:
        return largest
    quota = torch.floor(w * size).long()  # (C,)
    short = size - int(quota.sum())
    if short > 0:
        remainder = w * size - quota  # largest remainders first, ties to the lower class
        quota[torch.argsort(-remainder, stable=True)[:short]] += 1
    over = torch.nonzero(quota > counts).flatten().tolist()
    if over:
        c = over[0]
        raise ValueError(f"subset={size} with class_proportions asks class {c} for {int(quota[c])} samples but it has "
                         f"{int(counts[c])}; at most {int(largest.sum())} samples can follow these proportions")
    return quota


def proportional_indices(labels: Tensor, proportions: Sequence[float], size: int | None, seed: int) -> Tensor:
    """A seeded per-class draw whose class counts are :func:`proportional_counts` of the labels.

    Args:
        labels: class of each sample, shape (N,), int64, values in [0, C), C = len(proportions).
        proportions: w, the class proportions of the draw.
        size: samples to draw, or None for as many as the proportions allow.
        seed: seed of the draw; the same (labels, proportions, size, seed) give the same positions.

    Returns:
        Sorted positions, shape (sum of the counts,), int64, without repeats.
    """
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= len(proportions)):
        raise ValueError(f"labels must lie in [0, {len(proportions)}) to follow {len(proportions)} class proportions")
    counts = torch.bincount(labels, minlength=len(proportions))  # (C,)
    quota = proportional_counts(counts, proportions, size)
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for label, q in enumerate(quota.tolist()):
        members = torch.nonzero(labels == label).squeeze(1)  # (n_c,)
        chosen.append(members[torch.randperm(len(members), generator=generator)[:q]])
    return torch.sort(torch.cat(chosen)).values


def random_indices(num_samples: int, size: int, seed: int) -> Tensor:
    """``size`` sorted seeded positions out of ``num_samples``: the subset of unlabelled data."""
    if not 1 <= size <= num_samples:
        raise ValueError(f"size={size} must lie in [1, {num_samples}]")
    generator = torch.Generator().manual_seed(seed)
    return torch.sort(torch.randperm(num_samples, generator=generator)[:size]).values
