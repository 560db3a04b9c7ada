r"""The clustering losses on the embeddings z (n, p) and the centers mu (K, p), built on :mod:`lit_otclust.sinkhorn`.

:func:`ot_clustering_loss` is the paper's size-constrained loss, the entropic OT objective at the Sinkhorn plan (or
the transport cost alone, ``form="transport"``); :func:`soft_kmeans_loss` is the same without the size constraint
(soft k-means, DKM). Pure functions of z and mu, differentiable in both. Plain torch: no Lightning import.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lit_otclust.sinkhorn import (SinkhornResult, _full_precision, _Group, sinkhorn, sinkhorn_algorithm1,
                                  sinkhorn_fixed, squared_distances)

__all__ = ["ot_clustering_loss", "soft_kmeans_loss"]


def _objective(plan: Tensor, log_plan: Tensor, cost: Tensor, epsilon: float) -> Tensor:
    r""":math:`\sum_{ik} C_{ik}P_{ik} + \epsilon P_{ik}(\log P_{ik} - 1)`, the paper's (OT_eps), summed."""
    entropy = plan * (torch.where(plan > 0, log_plan, torch.zeros_like(log_plan)) - 1.0)  # 0 log 0 = 0
    return (cost * plan).sum() + epsilon * entropy.sum()


def _transport_loss(cost: Tensor, proportions: Tensor | None, *, epsilon: float, gradient: str, max_iter: int,
                    tol: float, reg_m: float | None, g_init: Tensor | None, distributed: bool, warn: bool,
                    solver: str, iters: int) -> tuple[Tensor, SinkhornResult]:
    """:func:`ot_clustering_loss`'s ``form="transport"`` on the cost (n, K): <pi, C> and the result."""
    if distributed:
        raise ValueError("form='transport' (model.ot_loss_form='transport') needs the whole batch in one process for "
                         "its differentiable iterations; use form='value' with distributed=True")
    if reg_m is not None:
        raise ValueError(f"form='transport' is balanced OT: it takes no reg_m (got {reg_m!r}); use form='value'")
    if gradient != "envelope":
        raise ValueError("form='transport' differentiates through its own transport_iters iterations; "
                         "gradient='unrolled' is for form='value'")
    if iters < 1:
        raise ValueError(f"`transport_iters` must be >= 1, got {iters}")
    fixed = cost.detach()
    if solver == "algorithm1":
        res = sinkhorn_algorithm1(fixed, proportions, epsilon=epsilon, n_iter=max_iter)
    elif solver == "fixed":
        res = sinkhorn_fixed(fixed, proportions, g_init, epsilon=epsilon, n_iter=max_iter)
    else:
        res = sinkhorn(fixed, None, proportions, epsilon=epsilon, max_iter=max_iter, tol=tol, g_init=g_init, warn=warn)
    # Autograd sees the T iterations and C, with their start g held fixed: the true gradient once the iterations
    # have forgotten where they started (Sinkhorn contracts, so T large enough at a given epsilon).
    pi = sinkhorn_fixed(cost, proportions, res.g, epsilon=epsilon, n_iter=iters)
    loss = (pi.plan * cost).sum()
    return loss, SinkhornResult(pi.plan, pi.f, pi.g, res.n_iter + iters, res.marginal_error, res.converged).detach()


@_full_precision
def ot_clustering_loss(
    z: Tensor,
    centers: Tensor,
    proportions: Tensor | None = None,
    *,
    epsilon: float,
    gradient: str = "envelope",
    max_iter: int = 1000,
    tol: float = 1e-6,
    reg_m: float | None = None,
    g_init: Tensor | None = None,
    distributed: bool = False,
    warn: bool = True,
    solver: str = "solve",
    form: str = "value",
    transport_iters: int = 20,
) -> tuple[Tensor, SinkhornResult]:
    r"""The paper's clustering loss :math:`\ell_c^{OT_\epsilon}`, the value of (OT_eps) at the Sinkhorn plan.

    .. math::
        \ell = \sum_{ik} \|z_i - \mu_k\|^2 P^*_{ik} + \epsilon P^*_{ik}(\log P^*_{ik} - 1)
        \; [+ \tau \, \mathrm{KL}(P^{*\top}\mathbf{1}_n \,|\, w)]

    with :math:`P^*` from :func:`sinkhorn` between :math:`a = \mathbf{1}_n / n` and :math:`b = w`; rows sum
    to 1/n, so the loss is on the scale of a per-sample mean squared distance.

    ``form="transport"``: the "sharp" Sinkhorn loss, the transport cost alone without the entropy term,

    .. math::
        \ell = \sum_{ik} \|z_i - \mu_k\|^2 \pi_{ik}, \quad \pi = \exp((f + g - C) / \epsilon)
        \text{ after } T \text{ iterations } f \leftarrow \epsilon(\log a - \mathrm{LSE}_k \tfrac{g - C}{\epsilon}),\;
        g \leftarrow \epsilon(\log w - \mathrm{LSE}_i \tfrac{f - C}{\epsilon}),

    with :math:`T` = ``transport_iters``, started from the g of the configured ``solver`` (run without autograd)
    and differentiated by autograd through the T iterations and C (:func:`sinkhorn_fixed` on the attached cost;
    Genevay, Peyre & Cuturi 2018, whom the paper cites for backpropagating through Sinkhorn). The column update
    comes last, so :math:`\pi`'s cluster sizes are exactly w. Balanced, single process.

    Args:
        z: (n, p) embeddings. centers: (K, p) cluster centers :math:`\mu`.
        proportions: (K,) cluster proportions w, summing to 1; default uniform.
        epsilon, max_iter, tol, reg_m, g_init, distributed, warn: as in :func:`sinkhorn`.
        gradient: ``"envelope"`` (default) solves without autograd and differentiates the objective with
            the plan held fixed, exact at the optimum by Danskin's theorem: :math:`\partial\ell/\partial C = P^*`.
            ``"unrolled"`` backpropagates through the iterations, as in the paper (single process only).
        solver: ``"fixed"``: :func:`sinkhorn_fixed`, ``max_iter`` iterations warm-started from ``g_init``, columns
            exact, rows loose, no host read (``tol`` unused). ``"solve"`` (default): :func:`sinkhorn`, solved to
            ``tol`` (warm-started from ``g_init``).
            ``"algorithm1"``: :func:`sinkhorn_algorithm1`, the paper's Algorithm 1 with ``n_iter = max_iter``
            from a cold start, columns exact and rows loose; balanced, single process (``tol``, ``g_init``
            unused). Its plan is a minimiser only once converged, so its ``"envelope"`` gradient is approximate.
        form: ``"value"`` (default, the objective above) or ``"transport"`` (:math:`\langle \pi, C\rangle`, above).
        transport_iters: T, the differentiable iterations of ``form="transport"``, >= 1.

    Returns:
        The scalar loss (with ``distributed``: this rank's share, summing over ranks to the global loss)
        and the :class:`SinkhornResult`, with the plan detached. With ``form="transport"`` its ``plan``, ``f`` and
        ``g`` are :math:`\pi`'s, ``n_iter`` counts the solve's iterations and the T, and ``marginal_error`` and
        ``converged`` report the solve.
    """
    if gradient not in ("envelope", "unrolled"):
        raise ValueError(f"`gradient` must be 'envelope' or 'unrolled', got {gradient!r}")
    if solver not in ("fixed", "solve", "algorithm1"):
        raise ValueError(f"`solver` must be 'fixed', 'solve' or 'algorithm1', got {solver!r}")
    if form not in ("value", "transport"):
        raise ValueError(f"`form` must be 'value' or 'transport', got {form!r}")
    cost = squared_distances(z, centers)  # (n, K)
    if form == "transport":
        return _transport_loss(cost, proportions, epsilon=epsilon, gradient=gradient, max_iter=max_iter, tol=tol,
                               reg_m=reg_m, g_init=g_init, distributed=distributed, warn=warn, solver=solver,
                               iters=transport_iters)
    if solver == "fixed" and gradient == "unrolled" and distributed and _Group(True).active:
        raise ValueError("gradient='unrolled' is not supported with distributed=True; use 'envelope'")
    if solver == "algorithm1":
        if reg_m is not None or (distributed and _Group(True).active):
            raise ValueError("solver='algorithm1' is the paper's balanced, single-process Sinkhorn: "
                             "use solver='solve' with reg_m or distributed=True")
        res = sinkhorn_algorithm1(cost if gradient == "unrolled" else cost.detach(), proportions,
                                  epsilon=epsilon, n_iter=max_iter)
        log_plan = (res.f[:, None] + res.g[None, :] - (cost if gradient == "unrolled" else cost.detach())) / epsilon
        loss = _objective(res.plan, log_plan, cost, epsilon)
        return loss, res.detach()
    solve = dict(epsilon=epsilon, max_iter=max_iter, tol=tol, reg_m=reg_m, g_init=g_init, distributed=distributed,
                 warn=warn)
    if solver == "fixed":
        c = cost if gradient == "unrolled" else cost.detach()
        res = sinkhorn_fixed(c, proportions, g_init, epsilon=epsilon, n_iter=max_iter, reg_m=reg_m,
                             distributed=distributed)
        plan = res.plan
        log_plan = (res.f[:, None] + res.g[None, :] - c) / epsilon
    elif gradient == "unrolled":
        if distributed and _Group(True).active:
            raise ValueError("gradient='unrolled' is not supported with distributed=True; use 'envelope'")
        res = sinkhorn(cost, None, proportions, **solve)
        plan = res.plan
        log_plan = (res.f[:, None] + res.g[None, :] - cost) / epsilon
    else:
        res = sinkhorn(cost.detach(), None, proportions, **solve)
        plan = res.plan
        log_plan = (res.f[:, None] + res.g[None, :] - cost.detach()) / epsilon
    loss = _objective(plan, log_plan, cost, epsilon)
    if reg_m is not None and not math.isinf(reg_m):
        group = _Group(distributed)
        b = plan.new_full((cost.shape[1],), 1.0 / cost.shape[1]) if proportions is None else proportions.to(plan)
        col = group.sum(plan.sum(0)) if not plan.requires_grad else plan.sum(0)  # (K,)
        kl = (torch.xlogy(col, col) - torch.xlogy(col, b) - col + b).sum()
        loss = loss + reg_m * kl / group.world_size  # each rank adds its share of this global term
    return loss, res.detach()


@_full_precision
def soft_kmeans_loss(z: Tensor, centers: Tensor, *, epsilon: float, form: str = "softmin") -> Tensor:
    r"""Soft k-means: the clustering loss without the cluster-size constraint. ``z`` (n, p), ``centers`` (K, p).

    ``form="softmin"`` (default): the one-marginal objective of Proposition 2 at its optimum. Without the size
    constraint the optimal plan is :math:`P^*_{ik} = \mathrm{softmax}_k(-C_{ik}/\epsilon)/n` and the objective
    :math:`\sum_{ik} C_{ik}P^*_{ik} + \epsilon P^*_{ik}(\log P^*_{ik} - 1)` equals

    .. math::
        -\frac{\epsilon}{n} \sum_i \mathrm{LSE}_k(-C_{ik}/\epsilon) - \epsilon(1 + \log n),

    a soft minimum of the squared distances, the entropic value the OT loss reduces to. Its gradient in C is
    :math:`P^*` (the envelope theorem): each point pulled to the centers by its soft assignment.

    ``form="expected"``: DKM's loss (Fard et al. 2018, their reference code), the expected distance under the
    soft assignment, :math:`\frac1n \sum_{ik} \mathrm{softmax}_k(-C_{ik}/\epsilon)\, C_{ik}`, with autograd through
    the softmax. That adds :math:`-\frac{1}{\epsilon} s_{ik}(C_{ik} - \bar C_i)` to the gradient, which sharpens
    the assignments. Not the soft-min: the two differ by the assignment's entropy, which DKM does not subtract.
    """
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"`epsilon` must be a finite number > 0, got {epsilon!r}")
    if form not in ("softmin", "expected"):
        raise ValueError(f"`form` must be 'softmin' or 'expected', got {form!r}")
    cost = squared_distances(z, centers)  # (n, K)
    if form == "expected":
        return (torch.softmax(-cost / epsilon, 1) * cost).sum(1).mean()
    n = cost.shape[0]
    return -epsilon * torch.logsumexp(-cost / epsilon, 1).mean() - epsilon * (1.0 + math.log(n))
