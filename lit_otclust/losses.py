r"""The clustering losses on the embeddings z (n, p) and the centers mu (K, p), built on :mod:`lit_otclust.sinkhorn`.

:func:`ot_clustering_loss` is the paper's size-constrained loss, the entropic OT objective at the Sinkhorn plan;
:func:`soft_kmeans_loss` is the same without the size constraint (soft k-means, DKM). Pure functions of z and mu,
differentiable in both. :class:`OTLoss` and :class:`SoftKMeans` are the modules that
:class:`lit_otclust.system.DeepClustering` takes as its ``loss``: each owns its arguments, checks, state, rule under
several processes and logged statistics. A new loss subclasses :class:`ClusteringLoss` (README, "Writing a loss").
Plain torch: no Lightning import.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import torch
import torch.distributed as dist
from torch import Tensor, nn

from lit_otclust.sinkhorn import (SOLVERS, SinkhornResult, _full_precision, _Group, check_epsilon, check_reg_m, sinkhorn,
                                  squared_distances)

__all__ = ["ClusteringLoss", "OTLoss", "SoftKMeans", "ot_clustering_loss", "soft_kmeans_loss"]


def _objective(plan: Tensor, log_plan: Tensor, cost: Tensor, epsilon: float) -> Tensor:
    r""":math:`\sum_{ik} C_{ik}P_{ik} + \epsilon P_{ik}(\log P_{ik} - 1)`, the paper's (OT_eps), summed."""
    entropy = plan * (torch.where(plan > 0, log_plan, torch.zeros_like(log_plan)) - 1.0)  # 0 log 0 = 0
    return (cost * plan).sum() + epsilon * entropy.sum()


@_full_precision
def ot_clustering_loss(
    z: Tensor,
    centers: Tensor,
    proportions: Tensor | None = None,
    *,
    epsilon: float,
    gradient: str = "envelope",
    solver: str = "solve",
    iters: int = 10,
    max_iter: int = 1000,
    tol: float = 1e-6,
    reg_m: float | None = None,
    g_init: Tensor | None = None,
    distributed: bool = False,
    warn: bool = True,
) -> tuple[Tensor, SinkhornResult]:
    r"""The paper's clustering loss :math:`\ell_c^{OT_\epsilon}`, the value of (OT_eps) at the Sinkhorn plan.

    .. math::
        \ell = \sum_{ik} \|z_i - \mu_k\|^2 P^*_{ik} + \epsilon P^*_{ik}(\log P^*_{ik} - 1)
        \; [+ \tau \, \mathrm{KL}(P^{*\top}\mathbf{1}_n \,|\, w)]

    with :math:`P^*` from the ``solver`` between :math:`a = \mathbf{1}_n / n` and :math:`b = w`; rows sum
    to 1/n, so the loss is on the scale of a per-sample mean squared distance.

    Args:
        z: (n, p) embeddings. centers: (K, p) cluster centers :math:`\mu`.
        proportions: (K,) cluster proportions w, summing to 1; default uniform.
        epsilon, max_iter, tol, reg_m, g_init, distributed, warn: as in :func:`lit_otclust.sinkhorn.sinkhorn`.
        gradient: ``"envelope"`` (default) solves without autograd and differentiates the objective with
            the plan held fixed, exact at the optimum by Danskin's theorem: :math:`\partial\ell/\partial C = P^*`.
            ``"unrolled"`` backpropagates through the iterations, as in the paper (single process only).
        solver: a key of :data:`lit_otclust.sinkhorn.SOLVERS`: ``"fixed"``
            (:func:`~lit_otclust.sinkhorn.sinkhorn_fixed`, ``iters`` iterations from ``g_init``), ``"solve"`` (default,
            :func:`~lit_otclust.sinkhorn.sinkhorn` to ``tol``) or ``"algorithm1"``
            (:func:`~lit_otclust.sinkhorn.sinkhorn_algorithm1`, ``max_iter`` iterations).
            A plan is a minimiser only once converged, so otherwise the ``"envelope"`` gradient is approximate.

    Returns:
        The scalar loss (with ``distributed``: this rank's share, summing over ranks to the global loss)
        and the :class:`SinkhornResult`, with the plan detached.
    """
    if gradient not in ("envelope", "unrolled"):
        raise ValueError(f"`gradient` must be 'envelope' or 'unrolled', got {gradient!r}")
    if solver not in SOLVERS:
        raise ValueError(f"`solver` must be one of {sorted(SOLVERS)}, got {solver!r}")
    if gradient == "unrolled" and distributed and _Group(True).active:
        raise ValueError("gradient='unrolled' needs the whole batch in one process; use 'envelope' with several")
    cost = squared_distances(z, centers)  # (n, K)
    c = cost if gradient == "unrolled" else cost.detach()
    res = SOLVERS[solver](c, proportions, g_init, epsilon=epsilon, iters=iters, max_iter=max_iter, tol=tol,
                          reg_m=reg_m, distributed=distributed, warn=warn)
    log_plan = (res.f[:, None] + res.g[None, :] - c) / epsilon  # (n, K)
    loss = _objective(res.plan, log_plan, cost, epsilon)
    if reg_m is not None and not math.isinf(reg_m):
        plan = res.plan
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

    a soft minimum of the squared distances. Its gradient in C is :math:`P^*` (the envelope theorem).

    ``form="expected"``: DKM's loss (Fard et al. 2018, their reference code), the expected distance under the
    soft assignment, :math:`\frac1n \sum_{ik} \mathrm{softmax}_k(-C_{ik}/\epsilon)\, C_{ik}`, with autograd through
    the softmax, which adds :math:`-\frac{1}{\epsilon} s_{ik}(C_{ik} - \bar C_i)` to the gradient (sharper
    assignments); it differs from the soft-min by the assignment's entropy.
    """
    check_epsilon(epsilon)
    if form not in ("softmin", "expected"):
        raise ValueError(f"`form` must be 'softmin' or 'expected', got {form!r}")
    cost = squared_distances(z, centers)  # (n, K)
    if form == "expected":
        return (torch.softmax(-cost / epsilon, 1) * cost).sum(1).mean()
    n = cost.shape[0]
    return -epsilon * torch.logsumexp(-cost / epsilon, 1).mean() - epsilon * (1.0 + math.log(n))


def _nearest(z: Tensor, centers: Tensor) -> tuple[Tensor, Tensor]:
    """Each point's squared distance to its nearest center (m,) and that center (m,), detached. Their mean over
    epsilon is the ``scale`` statistic: far below 1 every assignment is soft; far above, nearly hard."""
    nearest = squared_distances(z.detach(), centers.detach()).min(1)  # (m, K) -> (m,)
    return nearest.values, nearest.indices


class ClusteringLoss(nn.Module):
    """What :class:`lit_otclust.system.DeepClustering` asks of its clustering term ``l_c``.

    A subclass implements :meth:`forward`; the other methods have defaults that suit a loss without state.
    """

    #: Whether the loss prescribes the cluster sizes (then a batch must hold at least K points).
    constrains_sizes: bool = False
    #: The method's name in W&B tags (``_p`` is added when pre-trained).
    tag: str = "custom_loss"

    def forward(self, z: Tensor, centers: Tensor, proportions: Tensor) -> tuple[Tensor, dict[str, Tensor | float]]:
        """The loss (scalar, differentiable in ``z`` (m, p) and ``centers`` (K, p)) towards the proportions w (K,),
        and the statistics to log as ``train/<name>`` (epoch means)."""
        raise NotImplementedError

    def bind(self, num_clusters: int) -> None:
        """Called once by the system with K: where a loss allocates its per-cluster state (buffers)."""

    def check_world(self, world_size: int) -> None:
        """Raise if the loss cannot train with ``world_size`` processes (called at the trainer's setup)."""

    def potential(self) -> Tensor | None:
        """(K,) cluster potential g for the assignment rule ``argmin_k ||z - mu_k||^2 - g_k``; None: g = 0."""
        return None

    def plan(self, z: Tensor, centers: Tensor, proportions: Tensor) -> SinkhornResult | None:
        """The transport plan (m, K) of a batch, for the figures; None for a loss without one."""
        return None

    def epoch_stats(self) -> dict[str, float]:
        """Statistics to log once an epoch as ``train/<name>`` (read and reset at each training epoch's end)."""
        return {}

    def compile_solver(self, mode: str) -> None:
        """``torch.compile`` what the training step calls, where it runs without host reads (``model.compile``)."""


class OTLoss(ClusteringLoss):
    r"""The paper's loss: entropic OT between the batch (weights 1/m) and the centers (weights w),
    :func:`ot_clustering_loss`, solved from the previous batch's cluster potential.

    Args:
        epsilon: the entropic regularisation, in units of ``||z - mu||^2`` (the paper uses 1e-2).
        solver: ``"fixed"`` (default), ``"solve"`` or ``"algorithm1"``, as in :func:`ot_clustering_loss`, warm-started
            from the previous batch's potential. ``"fixed"`` logs its rows' error as ``train/sinkhorn_error``;
            ``"solve"`` counts unconverged solves in ``train/sinkhorn_unconverged`` (warned about once). Measured:
            RESULTS.md, "The loss weight lambda and the training solve".
        iters: the iterations of ``solver="fixed"``, >= 1.
        max_iter, tol: ``solver="solve"``'s cap on iterations and its tolerance on the column marginal's L1
            error; ``max_iter`` is also Algorithm 1's iteration count.
        gradient: ``"envelope"`` or ``"unrolled"`` (:func:`ot_clustering_loss`; unrolled: single process only).
        reg_m: unbalanced OT strength tau, a KL penalty on the cluster sizes (None: balanced, the paper).

    State (buffers, so checkpoints keep them): ``g_last`` (K,), the last batch's cluster potential, which warm-starts
    the next solve; ``g_avg`` (K,), its running average (a mean over the first 100 batches, then an EMA over ~100),
    for the ``"potential"`` assignment rule; ``g_count``, the batches folded in. Under DDP each rank holds its rows of
    one global problem, and its share of the loss is multiplied by the world size, since DDP averages the gradients.
    """

    constrains_sizes = True
    tag = "ot"

    def __init__(self, epsilon: float = 0.01, solver: Literal["fixed", "solve", "algorithm1"] = "fixed",
                 iters: int = 10, max_iter: int = 1000, tol: float = 1e-5,
                 gradient: Literal["envelope", "unrolled"] = "envelope", reg_m: float | None = None) -> None:
        super().__init__()
        check_epsilon(epsilon)
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {sorted(SOLVERS)}, got {solver!r}")
        if iters < 1 or max_iter < 1 or not tol > 0:
            raise ValueError(f"need iters >= 1, max_iter >= 1 and tol > 0, got {iters}, {max_iter}, {tol}")
        if gradient not in ("envelope", "unrolled"):
            raise ValueError(f"gradient must be 'envelope' or 'unrolled', got {gradient!r}")
        check_reg_m(reg_m)
        if solver == "algorithm1" and reg_m is not None:
            raise ValueError("solver='algorithm1' is the paper's balanced Sinkhorn: it takes no reg_m")
        self.epsilon, self.solver, self.iters, self.max_iter, self.tol = epsilon, solver, iters, max_iter, tol
        self.gradient, self.reg_m = gradient, reg_m
        self._value = ot_clustering_loss  # its torch.compile after compile_solver
        # Unconverged solves this epoch (solver="solve"), and whether the run was warned about them.
        self._unconverged, self._worst_error, self._warned = 0, 0.0, False

    def bind(self, num_clusters: int) -> None:
        self.register_buffer("g_last", torch.zeros(num_clusters))
        self.register_buffer("g_avg", torch.zeros(num_clusters))
        self.register_buffer("g_count", torch.zeros((), dtype=torch.long))
        # Host mirror of g_count > 0, read every step: reading the buffer would stall a GPU each time.
        self._warm = False
        self.register_load_state_dict_post_hook(_refresh_warm)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_value": ot_clustering_loss}  # a compiled function does not pickle (hparams)

    def check_world(self, world_size: int) -> None:
        if world_size > 1 and (self.gradient == "unrolled" or self.solver == "algorithm1"):
            raise ValueError("gradient='unrolled' and solver='algorithm1' need the whole batch in one process; "
                             "use gradient='envelope' and solver='fixed' or 'solve' with several devices")

    def compile_solver(self, mode: str) -> None:
        if self.solver == "fixed":  # the other solvers read the host as they iterate, which breaks a graph
            self._value = torch.compile(ot_clustering_loss, mode=mode)

    def forward(self, z: Tensor, centers: Tensor, proportions: Tensor) -> tuple[Tensor, dict[str, Tensor | float]]:
        if not hasattr(self, "g_last"):  # used on its own, outside a DeepClustering
            self.bind(len(centers))
        distance, nearest = _nearest(z, centers)
        group = _Group(True)
        loss, res = self._value(
            z, centers, proportions, epsilon=self.epsilon, gradient=self.gradient, solver=self.solver,
            iters=self.iters, max_iter=self.max_iter, tol=self.tol, reg_m=self.reg_m,
            g_init=self.g_last if self._warm else None, distributed=group.active,
            warn=False)  # counted per epoch and warned about once per run instead
        if self.solver == "solve" and not res.converged:  # the fixed-length solvers stop by design
            self._unconverged += 1
            self._worst_error = max(self._worst_error, float(res.marginal_error))
        self.g_last.copy_(res.g)
        self._average_potential(res.g)
        # The share of points the size constraint sends to another center than their nearest.
        moved = (res.plan.argmax(1) != nearest).float().mean()
        stats = {"plan_moved": moved, "sinkhorn_iters": float(res.n_iter), "sinkhorn_error": res.marginal_error}
        if self.solver != "fixed":  # the fixed solve checks nothing: its error stays a tensor on the device
            stats.update(sinkhorn_error=float(res.marginal_error), sinkhorn_converged=float(res.converged))
        stats.update(epsilon=self.epsilon, scale=distance.mean() / self.epsilon,
                     **({"reg_m": self.reg_m} if self.reg_m is not None else {}))
        # A rank's share of the global loss, scaled back up: DDP averages the gradients over the ranks.
        return loss * group.world_size, stats

    def _average_potential(self, g: Tensor) -> None:
        """Fold this batch's cluster potential g (K,) into ``g_avg``."""
        # Fix the gauge (f + c, g - c) before averaging. A cluster of proportion 0 has g = -inf: it stays out of the
        # mean and its average stays -inf (never assigned to), instead of turning g_avg into NaN for good.
        finite = torch.isfinite(g)
        g = g - torch.where(finite, g, 0.0).sum() / finite.sum()
        self.g_count += 1
        self._warm = True
        # Running mean, then an EMA over ~100 batches; on the device, so a GPU step never waits on the host.
        rate = self.g_count.reciprocal().clamp_min(0.01)
        self.g_avg.mul_(1 - rate).add_(rate * g)

    def potential(self) -> Tensor:
        return self.g_avg

    def plan(self, z: Tensor, centers: Tensor, proportions: Tensor) -> SinkhornResult:
        """The plan of the batch ``z`` (m, p) solved to ``tol`` from a cold start, without a warning: a figure's
        title says whether it converged."""
        cost = squared_distances(z, centers.detach())  # (m, K)
        return sinkhorn(cost, b=proportions, epsilon=self.epsilon, reg_m=self.reg_m, max_iter=self.max_iter,
                        tol=self.tol, warn=False)

    def epoch_stats(self) -> dict[str, float]:
        # Every rank solves the same global problem, so the counts agree without a reduction.
        count = self._unconverged
        if count and not self._warned and (not dist.is_initialized() or dist.get_rank() == 0):
            warnings.warn(
                f"{count} Sinkhorn solves did not reach tol {self.tol:g} within {self.max_iter} iterations this epoch "
                f"(worst column marginal error {self._worst_error:.3g}); `train/sinkhorn_unconverged` counts them "
                "every epoch. Raise model.loss.init_args.max_iter or epsilon, or loosen tol. (Warned once per run.)",
                RuntimeWarning, stacklevel=2)
            self._warned = True
        self._unconverged, self._worst_error = 0, 0.0
        return {"sinkhorn_unconverged": float(count)}


def _refresh_warm(module: OTLoss, incompatible_keys) -> None:
    module._warm = bool(module.g_count > 0)  # after a checkpoint's buffers are loaded


class SoftKMeans(ClusteringLoss):
    """Soft k-means, the OT loss without the size constraint (the paper's Proposition 2; DKM): :func:`soft_kmeans_loss`.

    Args:
        epsilon: the temperature, in units of ``||z - mu||^2``.
        form: ``"softmin"`` (default: the entropic value, the OT loss without the size constraint) or ``"expected"``
            (DKM's own loss, the expected distance under the soft assignment).
    """

    tag = "soft_kmeans"

    def __init__(self, epsilon: float = 0.01, form: Literal["softmin", "expected"] = "softmin") -> None:
        super().__init__()
        check_epsilon(epsilon)
        if form not in ("softmin", "expected"):
            raise ValueError(f"form must be 'softmin' or 'expected', got {form!r}")
        self.epsilon, self.form = epsilon, form

    def forward(self, z: Tensor, centers: Tensor, proportions: Tensor) -> tuple[Tensor, dict[str, Tensor | float]]:
        distance, _ = _nearest(z, centers)
        loss = soft_kmeans_loss(z, centers, epsilon=self.epsilon, form=self.form)
        return loss, {"epsilon": self.epsilon, "scale": distance.mean() / self.epsilon}
