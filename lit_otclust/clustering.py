"""Clustering on fixed embeddings: the embedding pass, k-means, and which k-means center carries which proportion.

:func:`embed_samples` embeds in-memory samples batch by batch and :func:`kmeans` clusters the embeddings: the
centers' initialisation (:class:`lit_otclust.phases.PhaseSwitch`), the pictures and the raw-pixel baseline use
them. The OT loss then gives center k the mass w_k. When w is not uniform, the order of the k-means centers
that start the joint phase decides which cluster is asked to hold which share of the data: a
large cluster carrying a small w_k is torn apart by the size constraint. :class:`PhaseSwitch`
reorders the centers with the matching below (``phases.match_proportions``) before training
on them. It returns ``order`` (K,), int64: center k becomes k-means center ``order[k]``
(``centers[order]``). :func:`constrained_kmeans` is k-means whose clusters hold prescribed shares (the estimator's
path on features and the ``center_init="constrained"`` start), with :func:`assign`, :func:`impose` and
:func:`minibatch_step` for new data. Plain torch, scipy and sklearn: no Lightning import.
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


def kmeans(z: Tensor, num_clusters: int, n_init: int, seed: int, sample_weight: np.ndarray | None = None) -> Tensor:
    """k-means++ with ``n_init`` restarts (sklearn) on z (N, p), returns the centers (K, p) as float32."""
    km = KMeans(n_clusters=num_clusters, n_init=n_init, random_state=seed, init="k-means++")
    km.fit(z.detach().double().cpu().numpy(), sample_weight=sample_weight)
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


# ---- size-constrained k-means -------------------------------------------------------------------------------------
# Semi-dual of the entropic problem at fixed centers: P_ik = a_i softmax_k((g_k - C_ik) / eps), so only the K column
# potentials g are unknown (the row potentials have the closed form f_i = -eps LSE_k((g_k - C_ik) / eps) + eps log a_i).
# A solve costs a few passes over the (n, K) costs: Newton steps on g, whose (K, K) Hessian is one small matrix product.
_NEWTON_ITERS = 30  # Newton steps per solve; warm-started from the last Lloyd step's g, one or two meet the tolerance
_NEWTON_LLOYD = 8  # at most this many inside a Lloyd step
_LLOYD_TOL = 1e-3  # the marginal error of the plans inside Lloyd's loop (the last one is solved to 1e-6)
_SEARCH_ROWS = 20_000  # the restarts and the swap search run on at most this many rows (a seeded sample), the
# polish on all: which center carries which share is decided by the bulk of the data, not by each row
_SWAP_MAX_CLUSTERS = 16  # the pairwise swap search (K (K - 1) / 2 trial runs) up to this K
_SWAP_SCREEN_ROWS = 3_000  # the rows of the screen: each swap's first Lloyd steps
_SWAP_TRIAL_STEPS = 3  # Lloyd steps of each screened swap before the best few run to convergence
_SWAP_CONVERGED = 2  # the screened swaps run to convergence on the search rows, cheapest first
_ROUND_MARGIN = 30.0  # rows whose two best (cost - g) are within this many eps may change cluster in the rounding


def _costs(x: Tensor, x_sq: Tensor, mu: Tensor) -> Tensor:
    """C_ki = ||x_i||^2 + ||mu_k||^2 - 2 mu_k . x_i, (K, n), one matrix product (addmm), clamped at 0 (the expansion
    can round slightly below). Stored (K, n), clusters by rows: a reduction over the K clusters then runs along
    contiguous rows of n, which on a CPU is ~10x faster than a softmax or min over the last dimension of an (n, K)
    array with K = 10 (measured: 1.3 ms against 22 ms for 10^5 x 10, one thread)."""
    out = torch.addmm(mu.pow(2).sum(1).unsqueeze(1), mu, x.T, beta=1.0, alpha=-2.0)  # (K, n)
    return out.add_(x_sq.unsqueeze(0)).clamp_min_(0.0)


class _Plan:
    """The entropic plan at fixed costs C (K, n) for column potentials g (K,): each point's softmax over the clusters
    P_ki = softmax_k((g_k - C_ki) / eps) (K, n), summing to 1 over k (the plan is a_i P_ki), the cluster masses
    q = P a (K,), the marginal error ``err`` = sum_k |q_k - w_k|, and the semi-dual's value
    F(g) = <w, g> - eps sum_i a_i LSE_k((g_k - C_ki) / eps)."""

    def __init__(self, cost: Tensor, g: Tensor, a: Tensor, w: Tensor, eps: float) -> None:
        z = cost.mul(-1.0 / eps).add_((g / eps).to(cost.dtype).unsqueeze(1))  # (K, n)
        # one exp pass, not logsumexp's and then the softmax's: the max over k, exp in place, the sum, the division
        # (measured, one thread, K = 10: 2.2 ms against 11.6 ms at n = 10^5, 0.04 against 0.08 ms at n = 700)
        # and the exponents floored at -80 (e^-80 ~ 2e-35 of the row's largest term: nothing in the sums): exp of an
        # argument below float32's range takes a slow path, 10-20x slower per element (measured: 17-36 ms against
        # 1.3 ms for 10^6 elements), and at small eps nearly all of a row's K - 1 other terms are there
        top = z.amax(0)  # (n,)
        self.rows = z.sub_(top).clamp_min_(-80.0).exp_()  # (K, n), in z's place
        total = self.rows.sum(0)  # (n,), in [1, K]
        self.rows.div_(total)
        lse = top.add_(total.log_())  # (n,)
        self.q = (self.rows @ a).double()  # (K,)
        # one read back to the host for both numbers (a GPU waits once per plan)
        err, dual = torch.stack([(self.q - w).abs().sum(), w @ g.double() - eps * (lse @ a).double()]).tolist()
        self.err, self.value = err, dual  # F(g)
        self.g = g


def _sinkhorn_update(cost: Tensor, a: Tensor, w: Tensor, eps: float, g: Tensor) -> Tensor:
    """The log-domain Sinkhorn column update g_k <- eps (log w_k - LSE_i(log a_i + (f_i - C_ki) / eps)), with the row
    potentials f_i = -eps LSE_k((g_k - C_ki) / eps): g_k + eps log(w_k / q_k), computed where q_k underflows."""
    z = (g.to(cost.dtype).unsqueeze(1) - cost) / eps  # (K, n)
    rows = torch.logsumexp(z, 0)  # (n,)
    log_q = torch.logsumexp(z - rows + a.clamp_min(torch.finfo(a.dtype).tiny).log(), 1).double()  # (K,)
    return g + eps * (w.log() - log_q)


def _solve(cost: Tensor, a: Tensor, w: Tensor, eps: float, g: Tensor, tol: float, max_iter: int = _NEWTON_ITERS,
           depth: int = 0) -> _Plan:
    """The column potentials g that give the plan the column masses w, to ``sum_k |q_k - w_k| <= tol``: the maximum
    of the concave semi-dual F(g) = <w, g> - eps sum_i a_i LSE_k((g_k - C_ik) / eps), whose gradient is w - q.

    Newton's direction solves (diag(q) - P^T diag(a) P) dg = eps (w - q), the Hessian of -F times eps; its null
    direction (a constant added to g changes nothing) is fixed by adding 1 1^T / K, and no component moves further
    than the costs' range. A step is halved until it raises F by 1e-4 of its first-order gain (Armijo), or lowers the
    marginal error where F's change is within float32 rounding of F (near the optimum); where halving fails, the
    solve first solves at 8 eps (recursively: epsilon scaling; far from the optimum at small eps the semi-dual is
    nearly piecewise linear and Newton's steps fail) and starts again from there, once; after that the log-domain
    Sinkhorn column update (:func:`_sinkhorn_update`) is taken instead."""
    g = g.double()
    K = len(w)
    # the masses q sum n terms in cost's dtype: in float32 they are good to ~1e-6, and a tighter tol would spin
    tol = max(tol, 1e-5 if cost.dtype != torch.float64 else 1e-12)
    plan, scaled = _Plan(cost, g, a, w, eps), False
    reach = float(cost.max() - cost.min()) + eps
    for _ in range(max_iter):
        if plan.err <= tol:
            break
        rows = plan.rows * a.sqrt()  # (K, n)
        hess = torch.diag(plan.q) - (rows @ rows.T).double() + 1.0 / K  # (K, K)
        hess.diagonal().add_(1e-12 * float(plan.q.max()))
        step = torch.linalg.solve(hess, w - plan.q) * eps
        step *= min(1.0, reach / float(step.abs().max()))  # no g moves past the costs' range: nearly empty clusters
        trial = None
        if torch.isfinite(step).all():
            t, gain = 1.0, float((w - plan.q) @ step)
            for _ in range(5):
                trial = _Plan(cost, g + t * step, a, w, eps)
                # Armijo on F; or, where F's change is float32 rounding near the optimum, a lower marginal error
                noise = 1e-6 * abs(plan.value) + 1e-9
                if trial.value >= plan.value + 1e-4 * t * gain or (trial.err < plan.err and
                                                                   trial.value >= plan.value - noise):
                    break
                t /= 2
            else:
                trial = None
        if trial is None and not scaled and depth < 8:  # epsilon scaling: solve at 8 eps, start again from there
            g = _solve(cost, a, w, 8 * eps, g, max(tol, 1e-3), max_iter, depth + 1).g
            plan, scaled = _Plan(cost, g, a, w, eps), True
            continue
        if trial is None:
            trial = _Plan(cost, _sinkhorn_update(cost, a, w, eps, g), a, w, eps)
            if trial.err >= plan.err and plan.err <= 100 * tol:
                break  # near the floor, neither step lowers the error: rounding decides it now
        plan, g = trial, trial.g
    return plan


def _uniform_or(sample_weight: Tensor | None, n: int, like: Tensor) -> Tensor:
    if sample_weight is None:
        return torch.full((n,), 1.0 / n, dtype=like.dtype, device=like.device)
    a = torch.as_tensor(sample_weight, dtype=like.dtype, device=like.device)
    return a / a.sum()


def _lloyd(x: Tensor, x_sq: Tensor, a: Tensor, w: Tensor, mu: Tensor, eps: float, scale: float, g: Tensor,
           max_iter: int, tol: float, final_tol: float = 1e-6) -> tuple[float, Tensor, Tensor]:
    """Entropic Lloyd's iterations from mu with g warm-started: (transport cost <P, C>, mu, g), the last plan solved
    to ``final_tol`` (the swap screen ranks its trials on plans solved to ``_LLOYD_TOL``)."""
    for _ in range(max_iter):
        # inexact inside the loop: the next step starts from this g, and only the last plan is solved to 1e-6
        plan = _solve(_costs(x, x_sq, mu), a, w, eps, g, tol=_LLOYD_TOL, max_iter=_NEWTON_LLOYD)
        g = plan.g
        mass = plan.q.to(x.dtype).unsqueeze(1)  # (K, 1)
        new = torch.where(mass > 0, (plan.rows * a) @ x / mass, mu)  # (K, d); a center without mass stays
        shift = float((new - mu).pow(2).sum(1).max()) / scale
        mu = new
        if shift < tol:
            break
    cost = _costs(x, x_sq, mu)
    iters = _NEWTON_ITERS if final_tol < _LLOYD_TOL else _NEWTON_LLOYD
    plan = _solve(cost, a, w, eps, g, tol=final_tol, max_iter=iters)
    value = float((plan.rows * cost).sum(0).double() @ a.double())
    return value, mu, plan.g


def _round(cost: Tensor, g: Tensor, a: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Hard labels argmin_k (C_ik - g_k) whose cluster masses meet w to a row, and the g that gives them.

    Only the rows whose two best (C_ik - g_k) lie within ``_ROUND_MARGIN`` eps of each other can change cluster as
    eps shrinks; on them alone, with the targets less the other rows' masses, the semi-dual is solved again at eps
    divided by 4 at a time until the hard masses meet the targets to half the smallest row weight (exact counts for
    equal weights where w n are integers, up to n = 5,000; within 1e-4 beyond) or eps has shrunk 4^8-fold. The rows outside stay where they were: g moves
    by a few eps, and their margin is ``_ROUND_MARGIN`` eps (checked: the labels returned are argmin_k (C - g))."""
    shifted = cost - g.to(cost.dtype).unsqueeze(1)  # (K, n)
    first, labels = shifted.min(0)  # (n,)
    shifted.scatter_(0, labels.unsqueeze(0), torch.inf)
    near = (shifted.min(0).values - first) < _ROUND_MARGIN * eps  # (n,): the two best within the margin
    K = len(w)
    mass = torch.zeros(K, dtype=torch.float64, device=cost.device).index_add_(0, labels, a.double())
    half_row = max(0.5 * float(a[a > 0].min()), 1e-4)  # exact counts up to n = 5,000 equal rows; 1e-4 of n beyond
    if float((mass - w).abs().max()) <= half_row or not bool(near.any()):
        return labels, g
    far_mass = torch.zeros_like(mass).index_add_(0, labels[~near], a[~near].double())
    target = w - far_mass  # (K,)
    if bool((target < -half_row).any()):
        return labels, g
    sub_cost, sub_a = cost[:, near], a[near]
    total = float(sub_a.double().sum())
    target = target.clamp_min(1e-12 * total) / total  # a cluster the near rows must leave empty: a trace, not 0
    sub_a = sub_a / total
    sub_g = g.double()
    for _ in range(8):
        eps /= 4
        solved = _solve(sub_cost, sub_a, target / target.sum(), eps, sub_g, tol=1e-9, max_iter=_NEWTON_LLOYD).g
        if not bool(torch.isfinite(solved).all()):
            break
        sub_g = solved
        sub_labels = (sub_cost - sub_g.to(cost.dtype).unsqueeze(1)).argmin(0)
        hard = torch.zeros_like(target).index_add_(0, sub_labels, sub_a.double())
        if float((hard - target).abs().max()) * total <= half_row:
            break
    full = (cost - sub_g.to(cost.dtype).unsqueeze(1)).min(0).indices  # (n,)
    return full, sub_g


def _scale(x: Tensor, x_sq: Tensor, a: Tensor, mu: Tensor) -> float:
    """s, the (weighted) mean squared distance of the points to their nearest center: epsilon's unit."""
    return max(float(_costs(x, x_sq, mu).min(0).values.double() @ a.double()), torch.finfo(torch.float32).tiny)


def _as_float(x: Tensor) -> Tensor:
    """x detached, in float64 if it is, else float32 (the speed of the fit: BLAS and exp in single precision)."""
    x = x.detach()
    return x if x.dtype == torch.float64 else x.float()


@torch.no_grad()
def constrained_lloyd(x: Tensor, proportions: Tensor, centers: Tensor, epsilon: float = 1e-2, max_iter: int = 100,
                      tol: float = 1e-6, scale: float | Tensor | None = None,
                      sample_weight: Tensor | None = None) -> tuple[float, Tensor, Tensor]:
    r"""Lloyd's iterations of :func:`constrained_kmeans` from given centers, center k carrying w_k.

    Args:
        x: (n, d) points (float64 stays float64, anything else becomes float32), on any device.
        proportions: w, (K,).
        centers: (K, d), the start.
        epsilon: the entropic regularisation, relative to s.
        max_iter, tol: the stopping rule, a center shift below ``tol`` relative to s; ``max_iter=0``: the plan for
            the given centers.
        scale: s; default: the mean squared distance of the points to their nearest starting center.
        sample_weight: (n,) non-negative row weights a (normalised to sum 1); default uniform.

    Returns:
        the transport cost :math:`\langle P, C \rangle` in x's units (comparable between starts), the centers (K, d)
        and the column potential g (K,) in units of squared distance, in x's dtype.
    """
    x = _as_float(x)
    mu = centers.detach().to(x)
    w = torch.as_tensor(proportions).detach().to(x.device, torch.float64)
    a = _uniform_or(sample_weight, len(x), x)
    x_sq = x.pow(2).sum(1)
    s = _scale(x, x_sq, a, mu) if scale is None else float(scale)
    g = torch.zeros_like(w)
    value, mu, g = _lloyd(x, x_sq, a, w, mu, epsilon * s, s, g, max_iter, tol)
    return value, mu, g.to(x.dtype)


@torch.no_grad()
def constrained_kmeans(x: Tensor, proportions: Tensor, n_init: int = 20, seed: int = 0, epsilon: float = 1e-2,
                       max_iter: int = 100, tol: float = 1e-4, sample_weight: Tensor | None = None,
                       search_rows: int = _SEARCH_ROWS) -> tuple[Tensor, Tensor, Tensor]:
    r"""k-means whose clusters hold prescribed shares: Lloyd's iterations with an entropic OT assignment step.

    .. math::
        \min_{\mu} \min_{P \in U(a, w)} \sum_{ik} P_{ik} \|x_i - \mu_k\|^2 + \epsilon\, s \sum_{ik} P_{ik} (\log P_{ik} - 1)

    with a the row weights (``sample_weight`` normalised; default 1/n), alternating the plan P and the centers
    :math:`\mu_k = \sum_i P_{ik} x_i / w_k`, to a center shift below ``tol`` (relative to s, the mean squared
    distance of the points to their nearest starting center, so that ``epsilon`` is relative). The plan is solved in
    the semi-dual over the K column potentials g alone (Newton's method, warm-started from the last step's g:
    :func:`_solve`), in float32 unless x is float64, on x's device: a Lloyd step costs two (n, K, d) matrix products
    and a few passes over the (n, K) costs.

    Which center carries which :math:`w_k` is a local optimum's choice, which the transport cost judges. The search
    runs on at most ``search_rows`` rows (a seeded sample; all rows when n is smaller): each of ``n_init`` restarts
    starts from one k-means++ run (sklearn, seed ``seed + r``), half with w matched to its clusters by size
    (:func:`match_sizes`), half with w in a seeded random order, and the restart of least transport cost wins. For
    K up to ``_SWAP_MAX_CLUSTERS``, a local search over which center carries which share follows: every swap of two
    centers' shares runs ``_SWAP_TRIAL_STEPS`` Lloyd steps on ``_SWAP_SCREEN_ROWS`` of the rows, the
    ``_SWAP_CONVERGED`` cheapest run to convergence on the search rows, and the best is
    kept if it lowers the transport cost, until none does (a restart's order is often one swap from a better one).
    Lloyd's iterations then run on all rows from the winner. Each point goes to
    :math:`\arg\min_k \|x_i - \mu_k\|^2 - g_k`, with g rounded so that the hard masses meet w to a row
    (:func:`_round`).

    Args:
        x: (n, d) points, on any device.
        proportions: w, (K,), non-negative, summing to 1.
        n_init, seed: the restarts and their seeds.
        epsilon: the entropic regularisation, relative to s.
        max_iter, tol: Lloyd's stopping rule.
        sample_weight: (n,) non-negative row weights, counted in the sizes; default: equal.
        search_rows: the rows of the restarts and the swap search.

    Returns:
        centers (K, d) float32, center k carrying w_k; the potential g (K,) float32 in units of squared distance;
        labels (n,) int64, ``argmin_k ||x_i - centers_k||^2 - g_k``; all on x's device.
    """
    x = _as_float(x)
    device, n = x.device, len(x)
    w = torch.as_tensor(proportions).detach().to(device, torch.float64)
    K = len(w)
    a = _uniform_or(sample_weight, n, x)
    x_sq = x.pow(2).sum(1)
    rng = np.random.default_rng(seed)
    if n > search_rows:  # the search on a sample, the polish on all rows
        rows = torch.as_tensor(np.sort(rng.choice(n, search_rows, replace=False)), device=device)
        xs, xs_sq, a_s = x[rows], x_sq[rows], a[rows] / a[rows].sum()
    else:
        xs, xs_sq, a_s = x, x_sq, a
    xs_np, a_np = xs.cpu().numpy(), a_s.double().cpu().numpy()
    order = torch.Generator().manual_seed(seed)
    best: tuple[float, Tensor, Tensor, Tensor, float] | None = None  # cost, centers, g, share, scale
    for restart in range(n_init):
        km = KMeans(n_clusters=K, n_init=1, random_state=seed + restart, init="k-means++").fit(
            xs_np, sample_weight=a_np * len(a_np))
        mu = torch.as_tensor(km.cluster_centers_).to(x)
        if restart % 2 == 0:
            sizes = torch.as_tensor(np.bincount(km.labels_, weights=a_np, minlength=K))
            share = torch.argsort(match_sizes(sizes, w.cpu())).to(device)  # k-means center j carries w[share[j]]
        else:
            share = torch.randperm(K, generator=order).to(device)
        # one scale per restart, kept by its swaps: epsilon stays relative to the same s while the search runs
        s = _scale(xs, xs_sq, a_s, mu)
        value, mu, g = _lloyd(xs, xs_sq, a_s, w[share], mu, epsilon * s, s, torch.zeros_like(w), max_iter, tol)
        if best is None or value < best[0]:
            best = (value, mu, g, share, s)
    value, mu, g, share, s = best
    improved = K <= _SWAP_MAX_CLUSTERS
    if len(xs) > _SWAP_SCREEN_ROWS:  # the screen on fewer rows still
        screen = torch.as_tensor(np.sort(rng.choice(len(xs), _SWAP_SCREEN_ROWS, replace=False)), device=device)
        xc, xc_sq, a_c = xs[screen], xs_sq[screen], a_s[screen] / a_s[screen].sum()
    else:
        xc, xc_sq, a_c = xs, xs_sq, a_s
    while improved:
        improved = False
        trials = []
        for i in range(K):
            for j in range(i + 1, K):
                if w[share[i]] == w[share[j]]:
                    continue  # equal shares: the swap changes nothing
                swapped = share.clone()
                swapped[[i, j]] = share[[j, i]]
                g_swapped = g.clone()
                g_swapped[[i, j]] = g[[j, i]]
                trials.append((*_lloyd(xc, xc_sq, a_c, w[swapped], mu, epsilon * s, s, g_swapped, _SWAP_TRIAL_STEPS,
                                       tol, _LLOYD_TOL), swapped))
        trials.sort(key=lambda trial: trial[0])
        for _, mu_t, g_t, swapped in trials[:_SWAP_CONVERGED]:
            trial = _lloyd(xs, xs_sq, a_s, w[swapped], mu_t, epsilon * s, s, g_t, max_iter, tol)
            if trial[0] < value * (1 - 1e-9):
                (value, mu, g), share, improved = trial, swapped, True
    if xs is not x:
        value, mu, g = _lloyd(x, x_sq, a, w[share], mu, epsilon * s, s, g, max_iter, tol)
    cost = _costs(x, x_sq, mu)
    labels, g = _round(cost, _solve(cost, a, w[share], epsilon * s, g, tol=1e-6).g, a, w[share], epsilon * s)
    back = torch.argsort(share)  # center k of the result is center back[k] of the search, which carries w_k
    return mu[back].float(), g[back].float(), share[labels]


@torch.no_grad()
def assign(x: Tensor, centers: Tensor, potentials: Tensor | None = None) -> Tensor:
    """argmin_k ||x_i - mu_k||^2 - g_k, (n,) int64, on x's device: the rule of :func:`constrained_kmeans`'s labels
    (the same kernel, so the labels of the training rows come back bit for bit); g = 0: the nearest center."""
    x = _as_float(x)
    cost = _costs(x, x.pow(2).sum(1), centers.detach().to(x))  # (K, n)
    if potentials is not None:
        cost -= potentials.detach().to(x).unsqueeze(1)
    return cost.min(0).indices


@torch.no_grad()
def impose(x: Tensor, centers: Tensor, proportions: Tensor, epsilon: float = 1e-2, potentials: Tensor | None = None,
           sample_weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The assignment of x (n, d) to fixed centers whose cluster masses meet w: the entropic semi-dual solved on x
    (epsilon relative to x's mean squared distance to its nearest center, warm-started from ``potentials``), then
    rounded to hard labels (:func:`_round`). Returns labels (n,) int64 and g (K,) float32, on x's device."""
    x = _as_float(x)
    x_sq, mu = x.pow(2).sum(1), centers.detach().to(x)
    w = torch.as_tensor(proportions).detach().to(x.device, torch.float64)
    a = _uniform_or(sample_weight, len(x), x)
    eps = epsilon * _scale(x, x_sq, a, mu)
    g = torch.zeros_like(w) if potentials is None else potentials.detach().to(w)
    cost = _costs(x, x_sq, mu)
    labels, g = _round(cost, _solve(cost, a, w, eps, g, tol=1e-6).g, a, w, eps)
    return labels, g.float()


@torch.no_grad()
def minibatch_step(x: Tensor, proportions: Tensor, centers: Tensor, potentials: Tensor, counts: Tensor, eps: float,
                   sample_weight: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    r"""One step of mini-batch size-constrained k-means (the constrained twin of sklearn's MiniBatchKMeans step).

    The batch's plan P (its rows' weights a, the shares w) is solved at the current centers, warm-started from the
    running potentials; each center then moves towards the batch's mean of its plan mass,
    :math:`\mu_k \leftarrow \mu_k + \frac{m_k}{c_k}(\bar x_k - \mu_k)` with m_k the batch's mass on k (in rows) and
    :math:`c_k` the rows counted on k so far, this batch included (a per-center step 1 / count, as MiniBatchKMeans);
    the running potentials average the batches' by their rows.

    Args:
        x: (m, d) the batch; proportions: w (K,); centers: (K, d); potentials: g (K,), in units of squared distance;
        counts: (K,) the rows counted on each center before this batch; eps: the entropic regularisation, in units
        of squared distance; sample_weight: (m,) row weights (in rows: a weight of 2 counts as two rows).

    Returns:
        the new centers (K, d), the batch's potentials g (K,) and the new counts (K,), in x's dtype / float64.
    """
    x = _as_float(x)
    mu = centers.detach().to(x)
    w = torch.as_tensor(proportions).detach().to(x.device, torch.float64)
    rows = torch.ones(len(x), dtype=x.dtype, device=x.device) if sample_weight is None else \
        torch.as_tensor(sample_weight, dtype=x.dtype, device=x.device)
    a = rows / rows.sum()
    plan = _solve(_costs(x, x.pow(2).sum(1), mu), a, w, eps, potentials.detach().to(w), tol=1e-4)
    mass = plan.rows @ rows  # (K,): the batch's rows on each center
    counts = counts.to(torch.float64) + mass.double()
    batch_sum = (plan.rows * rows) @ x  # (K, d)
    step = (1.0 / counts.clamp_min(torch.finfo(torch.float64).tiny)).to(x.dtype).unsqueeze(1)  # (K, 1)
    return mu + step * (batch_sum - mass.unsqueeze(1) * mu), plan.g, counts
