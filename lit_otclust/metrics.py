"""Clustering accuracy (Hungarian matching), NMI and ARI from one K x C contingency table.

Plain torch + scipy, and torchmetrics, whose ``Metric`` sums the table exactly across processes.
"""

from __future__ import annotations

from typing import Any

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor
from torchmetrics import Metric

__all__ = ["HungarianAccuracy", "hungarian_accuracy", "match_clusters"]


def _check_labels(values: Tensor, name: str, upper: int, upper_name: str) -> None:
    if values.dtype == torch.bool or values.is_floating_point() or values.is_complex():
        raise ValueError(f"`{name}` must hold integers, got dtype {values.dtype}.")
    if values.numel() == 0:
        return
    low, high = (int(v) for v in torch.stack(torch.aminmax(values)).tolist())  # one pass, one device sync
    if low < 0 or high >= upper:
        raise ValueError(f"`{name}` must lie in [0, {upper_name}) = [0, {upper}), got values in [{low}, {high}].")


def _contingency_update(preds: Tensor, target: Tensor, num_clusters: int, num_classes: int,
                        validate_args: bool = True) -> Tensor:
    """Count :math:`n_{kc} = \\#\\{i : k_i = k, y_i = c\\}` for one batch; returns (K, C) int64."""
    if validate_args:
        if preds.shape != target.shape:
            raise ValueError(f"`preds` and `target` must have the same shape, got {tuple(preds.shape)} and "
                             f"{tuple(target.shape)}.")
        _check_labels(preds, "preds", num_clusters, "num_clusters")
        _check_labels(target, "target", num_classes, "num_classes")
    # One bincount over the flat index k * C + c is a single kernel, O(N) for 70k samples.
    flat = preds.reshape(-1).long() * num_classes + target.reshape(-1).long()
    return torch.bincount(flat, minlength=num_clusters * num_classes).reshape(num_clusters, num_classes)


def match_clusters(contingency: Tensor) -> Tensor:
    r"""One-to-one matching of clusters to classes that maximises the matched counts.

    .. math::

        \sigma^\star = \arg\max_{\sigma} \sum_{k} n_{k\,\sigma(k)},

    over injective partial maps :math:`\sigma` from the :math:`K` clusters to the :math:`C` classes (Hungarian
    algorithm, ``scipy.optimize.linear_sum_assignment``); when :math:`K > C`, :math:`K - C` clusters stay unmatched.

    Args:
        contingency: (K, C) counts :math:`n_{kc}` of samples in cluster k with class c.

    Returns:
        (K,) long tensor on ``contingency``'s device: the class of each cluster, -1 if unmatched.
    """
    counts = contingency.detach().cpu().double().numpy()
    rows, cols = linear_sum_assignment(counts, maximize=True)
    matching = torch.full((contingency.shape[0],), -1, dtype=torch.long)
    matching[torch.from_numpy(rows).long()] = torch.from_numpy(cols).long()
    return matching.to(contingency.device)


def _nmi(contingency: Tensor) -> Tensor:
    """NMI with the arithmetic-mean normaliser, following sklearn's special cases."""
    counts = contingency.double()
    n = counts.sum()
    rows, cols = counts.sum(1), counts.sum(0)  # (K,), (C,)
    rows, cols = rows[rows > 0], cols[cols > 0]  # sklearn sees only labels that occur
    if rows.numel() == cols.numel() <= 1:
        # Neither labelling splits the data (or there is none): a perfect match by convention.
        return torch.ones((), dtype=torch.float64)
    if rows.numel() == 1 or cols.numel() == 1:
        return torch.zeros((), dtype=torch.float64)  # one side has zero entropy, so MI = 0
    nz = counts > 0
    outer = counts.sum(1, keepdim=True) * counts.sum(0, keepdim=True)  # (K, C)
    n_kc = counts[nz]
    # log(a / b) as log a - log b keeps precision for the small ratios of large counts.
    terms = n_kc / n * (torch.log(n_kc) + torch.log(n) - torch.log(outer[nz]))
    # sklearn zeroes terms below machine epsilon; doing the same keeps "mi == 0" identical.
    terms = torch.where(terms.abs() < torch.finfo(torch.float64).eps, 0.0, terms)
    mi = terms.sum().clamp_min(0.0)
    if mi == 0:
        return torch.zeros((), dtype=torch.float64)

    def entropy(sizes: Tensor) -> Tensor:
        total = sizes.sum()
        return -(sizes / total * (torch.log(sizes) - torch.log(total))).sum()

    return mi / ((entropy(rows) + entropy(cols)) / 2)


def _ari(contingency: Tensor) -> Tensor:
    """ARI from the pair confusion matrix, as sklearn.metrics.adjusted_rand_score."""
    counts = contingency.long()
    n = counts.sum()
    # Pair counts are O(N^2): exact in int64 up to N ~ 3e9 samples.
    sum_squares = (counts * counts).sum()
    same_both = sum_squares - n
    same_cluster_only = (counts.sum(1) ** 2).sum() - sum_squares
    same_class_only = (counts.sum(0) ** 2).sum() - sum_squares
    different_both = n * n - same_cluster_only - same_class_only - sum_squares
    if same_cluster_only == 0 and same_class_only == 0:
        return torch.ones((), dtype=torch.float64)  # identical partitions, or no data
    # The products reach N^4 and overflow int64 from N ~ 55k, hence float64 here.
    tp, tn = same_both.double(), different_both.double()
    fp, fn = same_cluster_only.double(), same_class_only.double()
    return 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))


def _size_error(counts: Tensor, matching: Tensor) -> Tensor:
    """max_k |n_k / N - n_{sigma(k)} / N|: how far each cluster's share lies from its matched class's share.

    ``counts`` (K, C) float64, ``matching`` (K,), -1 for an unmatched cluster, whose whole share counts as error."""
    total = counts.sum()
    cluster_share, class_share = counts.sum(1) / total, counts.sum(0) / total
    target = torch.where(matching >= 0, class_share[matching.clamp_min(0)], torch.zeros_like(cluster_share))
    return (cluster_share - target).abs().max()


def _compute(contingency: Tensor) -> dict[str, Tensor]:
    """Accuracy, NMI, ARI, the size error (:func:`_size_error`) and the matching from a (K, C) contingency table."""
    matching = match_clusters(contingency)  # (K,)
    counts = contingency.double()
    matched = matching >= 0
    clusters = torch.arange(contingency.shape[0], device=contingency.device)[matched]
    # 0 / 0 = nan when nothing was counted: an accuracy over no samples is undefined.
    acc = counts[clusters, matching[matched]].sum() / counts.sum()
    device = contingency.device
    return {
        "acc": acc.float(),
        "size_error": _size_error(counts, matching).float(),
        "nmi": _nmi(contingency).to(device, torch.float32),
        "ari": _ari(contingency).to(device, torch.float32),
        "matching": matching,
    }


def hungarian_accuracy(preds: Tensor, target: Tensor, num_clusters: int, num_classes: int) -> dict[str, Tensor]:
    """Functional twin of :class:`HungarianAccuracy` for one set of predictions.

    Args:
        preds: (N,) integer cluster ids in [0, K). target: (N,) integer class labels in [0, C).
        num_clusters: K, the number of clusters. num_classes: C, the number of classes.

    Returns:
        ``{"acc", "nmi", "ari", "size_error"}`` float32 scalars and ``"matching"``, (K,) long, -1 if unmatched.

    Raises:
        ValueError: if the shapes differ, the dtypes are not integer, or a value is out of range.

    Example:
        >>> import torch
        >>> out = hungarian_accuracy(torch.tensor([2, 2, 0, 1]), torch.tensor([0, 0, 1, 1]), 3, 2)
        >>> out["acc"], out["matching"]
        (tensor(0.7500), tensor([ 1, -1,  0]))
    """
    return _compute(_contingency_update(preds, target, num_clusters, num_classes))


class HungarianAccuracy(Metric):
    r"""Clustering accuracy under the best one-to-one cluster-to-class matching, with NMI and ARI.

    .. math::

        \mathrm{acc} = \frac{1}{N} \max_{\sigma} \sum_{i=1}^{N} \mathbb{1}_{y_i = \sigma(k_i)}
                     = \frac{1}{N} \max_{\sigma} \sum_{k} n_{k\,\sigma(k)},

    where :math:`k_i \in [0, K)` is the cluster of sample :math:`i`, :math:`y_i \in [0, C)` its class, :math:`n_{kc}`
    the number of samples in cluster :math:`k` with class :math:`c`, and :math:`\sigma` ranges over one-to-one maps
    from clusters to classes (:func:`match_clusters`; the Evaluation paragraph of Genevay, Dulac-Arnold & Vert, 2020).
    With :math:`K \neq C`, :math:`|K - C|` clusters or classes stay unmatched; an unmatched cluster's samples are errors.

    NMI (arithmetic-mean normalisation) and ARI are computed from the same table and agree with
    ``sklearn.metrics.normalized_mutual_info_score`` and ``adjusted_rand_score``, including their conventions for
    degenerate labellings. The state is only the (K, C) int64 table, so memory is O(K C) whatever the number of samples.

    The table is summed across processes: evaluation loaders must see every sample exactly once (Lightning's
    ``UnrepeatedDistributedSampler``, not ``DistributedSampler``, which pads with repeats).

    Args:
        num_clusters: K, the number of clusters; ``preds`` must lie in [0, K).
        num_classes: C, the number of classes; ``target`` must lie in [0, C).
        validate_args: check shapes, dtypes and ranges in ``update`` (costs a device sync).
        kwargs: further arguments of :class:`torchmetrics.Metric`.

    ``update(preds, target)`` takes (N,) integer cluster ids and labels; ``compute()`` returns what
    :func:`hungarian_accuracy` does (``matching[preds]`` reports predictions as class labels).

    Raises:
        ValueError: ``num_clusters`` or ``num_classes`` not a positive integer; in ``update``, as
            :func:`hungarian_accuracy`.

    Example:
        >>> import torch
        >>> metric = HungarianAccuracy(num_clusters=2, num_classes=2)
        >>> metric.update(torch.tensor([1, 1, 0]), torch.tensor([0, 0, 1]))
        >>> metric.update(torch.tensor([0]), torch.tensor([0]))
        >>> out = metric.compute()
        >>> out["acc"], out["matching"]
        (tensor(0.7500), tensor([1, 0]))
    """

    is_differentiable: bool = False
    higher_is_better: bool = True
    full_state_update: bool = False
    contingency: Tensor

    def __init__(self, num_clusters: int, num_classes: int, validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name, value in (("num_clusters", num_clusters), ("num_classes", num_classes)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        self.num_clusters = num_clusters
        self.num_classes = num_classes
        self.validate_args = validate_args
        self.add_state("contingency", default=torch.zeros(num_clusters, num_classes, dtype=torch.long),
                       dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add the (K, C) counts of one batch of (N,) cluster ids and (N,) class labels."""
        self.contingency += _contingency_update(preds, target, self.num_clusters, self.num_classes, self.validate_args)

    def compute(self) -> dict[str, Tensor]:
        """Match clusters to classes once on the (reduced) table and score the clustering."""
        return _compute(self.contingency)
