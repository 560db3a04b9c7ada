"""Clustering on fixed embeddings: the embedding pass, k-means, and which k-means center carries which proportion.

:func:`embed_samples` embeds in-memory samples batch by batch and :func:`kmeans` clusters the embeddings: the
centers' initialisation (:class:`lit_otclust.phases.PhaseSwitch`), the pictures and the raw-pixel baseline use
them. The OT loss then gives center k the mass w_k. When w is not uniform, the order of the k-means centers
that start the joint phase decides which cluster is asked to hold which share of the data: a
large cluster carrying a small w_k is torn apart by the size constraint. :class:`PhaseSwitch`
reorders the centers with the matching below (``phases.match_proportions``) before training
on them. It returns ``order`` (K,), int64: center k becomes k-means center ``order[k]``
(``centers[order]``). Plain torch, scipy and sklearn: no Lightning import.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from torch import Tensor, nn


@torch.no_grad()
def embed_samples(module: nn.Module, x: Tensor, batch_size: int) -> Tensor:
    """(N, p) embeddings ``module.embed(x)`` of in-memory samples x (N, *input_shape) by a module with ``embed``,
    ``device`` and ``dtype`` (the system), in batches of ``batch_size`` (the data module's evaluation batch:
    :func:`lit_otclust.data.eval_batch_size`). The batches take the module's dtype as Lightning's own batches do
    (``trainer.precision=64-true``: float64)."""
    return torch.cat([module.embed(xb.to(module.device, module.dtype)) for xb in x.split(batch_size)])


def kmeans(z: Tensor, num_clusters: int, n_init: int, seed: int) -> Tensor:
    """k-means++ with ``n_init`` restarts (sklearn) on z (N, p), returns the centers (K, p) as float32."""
    km = KMeans(n_clusters=num_clusters, n_init=n_init, random_state=seed, init="k-means++")
    km.fit(z.detach().double().cpu().numpy())
    return torch.as_tensor(km.cluster_centers_, dtype=torch.float32)


def match_sizes(sizes: Tensor, proportions: Tensor) -> Tensor:
    r"""Put each proportion on the k-means cluster whose size is closest to it.

    .. math::
        \sigma^\star = \arg\min_{\sigma \in S_K} \sum_{k=1}^K \left(s_{\sigma(k)} - w_k\right)^2

    where :math:`s_j` is the fraction of the samples nearest k-means center :math:`j`, :math:`w_k`
    the prescribed proportion of cluster :math:`k` and :math:`S_K` the permutations of K items;
    center :math:`k` becomes k-means center :math:`\sigma^\star(k)`. Solved as a linear assignment
    (Hungarian algorithm, ``scipy.optimize.linear_sum_assignment``). Squared rather than absolute
    differences: expanding the square, the objective is :math:`-2 \sum_k s_{\sigma(k)} w_k` plus a
    constant, so by the rearrangement inequality the optimum pairs the sizes and the proportions in
    sorted order (the largest cluster carries the largest w), uniquely when the sizes are distinct;
    the absolute difference ties between orders whenever the sizes and the proportions do not
    interleave.

    Centers matched to equal proportions are interchangeable (the objective does not change);
    they keep their k-means order, so a uniform w gives the identity and leaves the centers as
    k-means returned them.

    Args:
        sizes: s, (K,), the k-means cluster sizes as fractions of the samples.
        proportions: w, (K,), the prescribed proportions.

    Returns:
        order, (K,), int64: a permutation of 0..K-1.
    """
    s = sizes.detach().double().cpu().numpy()  # (K,)
    w = proportions.detach().double().cpu().numpy()  # (K,)
    if s.shape != w.shape or s.ndim != 1:
        raise ValueError(f"sizes {tuple(s.shape)} and proportions {tuple(w.shape)} must both be (K,)")
    cost = (w[:, None] - s[None, :]) ** 2  # (K, K): row k, the proportion; column j, the k-means center
    _, order = linear_sum_assignment(cost)  # the rows come back as 0..K-1
    for value in np.unique(w):
        tied = np.flatnonzero(w == value)
        order[tied] = np.sort(order[tied])
    return torch.as_tensor(order, dtype=torch.int64)


@torch.no_grad()
def constrained_lloyd(x: Tensor, proportions: Tensor, centers: Tensor, epsilon: float = 1e-2, max_iter: int = 100,
                      tol: float = 1e-6, scale: Tensor | None = None) -> tuple[float, Tensor, Tensor]:
    r"""Lloyd's iterations of :func:`constrained_kmeans` from given centers, center k carrying w_k.

    Args:
        x: (n, d) points, float64.
        proportions: w, (K,), float64.
        centers: (K, d), the start.
        epsilon: the entropic regularisation, relative to s.
        max_iter, tol: the stopping rule, a center shift below ``tol`` relative to s; ``max_iter=0``: the plan for
            the given centers.
        scale: s; default: the mean squared distance of the points to their nearest starting center.

    Returns:
        the transport cost :math:`\langle P, C \rangle` in x's units (comparable between starts), the centers (K, d)
        and the column potential g (K,) in units of squared distance.
    """
    from lit_otclust.sinkhorn import sinkhorn, squared_distances  # here: the figures import this module early

    mu, w = centers.double(), proportions.double()
    if scale is None:
        scale = squared_distances(x, mu).min(1).values.mean().clamp_min(torch.finfo(x.dtype).tiny)
    g = None
    # check_every=1: warm-started from the last step's g, a solve near Lloyd's fixed point meets tol in a sweep or two;
    # the default's 10 sweeps before the first check made a 1,000-point fit ~1.7x slower (11.2 s against 6.6 s)
    for _ in range(max_iter):
        res = sinkhorn(squared_distances(x, mu) / scale, None, w, epsilon=epsilon, g_init=g, warn=False, check_every=1)
        g = res.g
        new = res.plan.T @ x / res.plan.sum(0).clamp_min(torch.finfo(x.dtype).tiny)[:, None]  # (K, d)
        shift = float((new - mu).pow(2).sum(1).max() / scale)
        mu = new
        if shift < tol:
            break
    cost = squared_distances(x, mu)  # (n, K)
    res = sinkhorn(cost / scale, None, w, epsilon=epsilon, g_init=g, warn=False, check_every=1)
    return float((res.plan * cost).sum()), mu, res.g * scale


@torch.no_grad()
def constrained_kmeans(x: Tensor, proportions: Tensor, n_init: int = 20, seed: int = 0, epsilon: float = 1e-2,
                       max_iter: int = 100, tol: float = 1e-6) -> tuple[Tensor, Tensor, Tensor]:
    r"""k-means whose clusters hold prescribed shares: Lloyd's iterations with an entropic OT assignment step.

    .. math::
        \min_{\mu} \min_{P \in U(\frac{1}{n}\mathbf{1}, w)} \sum_{ik} P_{ik} \|x_i - \mu_k\|^2
        + \epsilon\, s \sum_{ik} P_{ik} (\log P_{ik} - 1)

    alternating the plan P (:func:`lit_otclust.sinkhorn.sinkhorn`, on the cost divided by s, the mean squared
    distance of the points to their nearest starting center, so that ``epsilon`` is relative) and the centers
    :math:`\mu_k = \sum_i P_{ik} x_i / w_k`, to a center shift below ``tol`` (relative to s). Which center carries which
    :math:`w_k` is a local optimum's choice, which the transport cost judges (k-means' sizes can mislead it: RESULTS.md,
    "Arrays and features"). So each of ``n_init`` restarts starts from one
    k-means++ run (sklearn, seed ``seed + r``), half with w matched to its clusters by size (:func:`match_sizes`),
    half with w in a seeded random order, and the restart of least transport cost wins. From it, a local search
    over which center carries which share: the two shares of each pair of centers are swapped and Lloyd's iterations
    rerun, a swap of lower transport cost is kept, until no swap lowers it (a restart's order is often one swap
    from a better one: RESULTS.md, "Arrays and features"). Each point then goes to
    :math:`\arg\min_k \|x_i - \mu_k\|^2 - g_k` with g the plan's column potential: the assignment that meets the
    shares (to rounding, at small epsilon).

    Args:
        x: (n, d) points.
        proportions: w, (K,), non-negative, summing to 1.
        n_init, seed: the restarts and their seeds.
        epsilon: the entropic regularisation, relative to s.
        max_iter, tol: Lloyd's stopping rule.

    Returns:
        centers (K, d), center k carrying w_k; the potential g (K,) in units of squared distance; labels (n,) int64,
        ``argmin_k ||x_i - centers_k||^2 - g_k``.
    """
    from lit_otclust.sinkhorn import squared_distances

    x = x.detach().double().cpu()
    w = proportions.detach().double().cpu()
    K = len(w)
    order = torch.Generator().manual_seed(seed)
    best: tuple[float, Tensor, Tensor, Tensor, Tensor] | None = None  # cost, centers, g, share, scale
    for restart in range(n_init):
        km = KMeans(n_clusters=K, n_init=1, random_state=seed + restart, init="k-means++").fit(x.numpy())
        mu = torch.as_tensor(km.cluster_centers_)
        if restart % 2 == 0:
            sizes = torch.bincount(torch.as_tensor(km.labels_), minlength=K).double() / len(x)
            share = torch.argsort(match_sizes(sizes, w))  # k-means center j carries w[share[j]]
        else:
            share = torch.randperm(K, generator=order)
        # one scale per restart, kept by its swaps: epsilon stays relative to the same s while the search runs
        scale = squared_distances(x, mu).min(1).values.mean().clamp_min(torch.finfo(x.dtype).tiny)
        value, mu, g = constrained_lloyd(x, w[share], mu, epsilon, max_iter, tol, scale)
        if best is None or value < best[0]:
            best = (value, mu, g, share, scale)
    value, mu, g, share, scale = best
    improved = True
    while improved:
        improved = False
        for a in range(K):
            for b in range(a + 1, K):
                if w[share[a]] == w[share[b]]:
                    continue  # equal shares: the swap changes nothing
                swapped = share.clone()
                swapped[[a, b]] = share[[b, a]]
                trial = constrained_lloyd(x, w[swapped], mu, epsilon, max_iter, tol, scale)
                if trial[0] < value * (1 - 1e-9):
                    (value, mu, g), share, improved = trial, swapped, True
    back = torch.argsort(share)  # center k of the result is center back[k] of the search, which carries w_k
    labels = share[(squared_distances(x, mu) - g).argmin(1)]
    return mu[back].float(), g[back].float(), labels
