r"""The solver: entropic optimal transport between a batch of embeddings and cluster centers.

Section 2 of Genevay, Dulac-Arnold & Vert (2020) writes constrained k-means as the entropic OT problem

.. math::
    \min_{P \ge 0} \langle P, C \rangle + \epsilon \sum_{ik} P_{ik}(\log P_{ik} - 1)
    \quad \text{s.t.} \quad P \mathbf{1}_K = a, \; P^\top \mathbf{1}_n = b,

with :math:`C_{ik} = \|z_i - \mu_k\|^2` (:func:`squared_distances`), :math:`a = \mathbf{1}_n / n` and :math:`b = w`
the cluster proportions. This module solves it with a log-domain Sinkhorn: to a tolerance (:func:`sinkhorn`), as the
paper's Algorithm 1 (:func:`sinkhorn_algorithm1`), or for a fixed number of warm-started iterations
(:func:`sinkhorn_fixed`), optionally relaxing the cluster marginal with a KL penalty (unbalanced OT, Chizat et al.
2018, ``reg_m``). The losses built on it are in :mod:`lit_otclust.losses`. Plain torch: no Lightning import.

Potentials follow the ott-jax convention :math:`P_{ik} = \exp((f_i + g_k - C_{ik}) / \epsilon)`, in cost
units, so :math:`\arg\max_k P_{ik} = \arg\min_k (C_{ik} - g_k)`.
"""
from __future__ import annotations

import functools
import math
import warnings
from typing import Callable, NamedTuple, Protocol, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["NonFiniteCostError", "SOLVERS", "SinkhornResult", "squared_distances", "sinkhorn", "sinkhorn_algorithm1",
           "sinkhorn_fixed"]

# Epsilon scaling: each stage divides epsilon by this factor and runs a few iterations (Schmitzer 2019, Sec. 3.2).
_SCALING_FACTOR = 0.5
_STAGE_ITERS = 3
# The fast solver updates the row potentials from the previous plan times exp(dg / eps); beyond this
# exponent, plan entries that underflowed could matter again, so it recomputes the log-sum-exp instead.
_MAX_LOG_STEP = {torch.float32: 10.0, torch.float64: 30.0}
# exp() of arguments that underflow is far slower on CPU; floored entries are negligible against any tolerance.
_EXP_FLOOR = {torch.float32: -80.0, torch.float64: -300.0}
# Column or row masses below this are too close to underflow to take their log safely.
_TINY = {torch.float32: 1e-30, torch.float64: 1e-250}
# Near the optimum a Newton step changes the semi-dual F (n + K products) by less than its rounding, ~1e-7 * n in
# float32: within this much (relative) F counts as level, and a step that lowers the marginal error is progress.
_F_ROUNDING = {torch.float32: 1e-5, torch.float64: 1e-13}


class NonFiniteCostError(ValueError):
    """The cost matrix holds NaN or inf: the embeddings or the centers diverged."""


class SinkhornResult(NamedTuple):
    """Output of :func:`sinkhorn`.

    ``plan`` (n, K) and the potentials ``f`` (n,), ``g`` (K,) in cost units, with
    ``plan = exp((f[:, None] + g[None, :] - cost) / epsilon)``. In the balanced problem the potentials
    are defined up to ``f + c, g - c``; the solver returns the gauge where ``<b, g> = 0``.
    ``n_iter`` counts Sinkhorn iterations over all epsilon stages. ``marginal_error`` is the L1 error of
    the column (cluster) marginal, the one not enforced by the last update: the rows always sum to ``a``.
    """

    plan: Tensor
    f: Tensor
    g: Tensor
    n_iter: int
    marginal_error: float
    converged: bool

    def detach(self) -> SinkhornResult:
        """This result with ``plan``, ``f`` and ``g`` cut from the graph (field by field: ``torch.compile`` fails on
        a tuple that ``_replace`` made)."""
        return SinkhornResult(self.plan.detach(), self.f.detach(), self.g.detach(), self.n_iter, self.marginal_error,
                              self.converged)


_F = TypeVar("_F", bound=Callable)


def _full_precision(fn: _F) -> _F:
    """Runs ``fn`` with autocast off: under mixed precision bfloat16 products would round a squared distance of 100
    by ~0.4, forty times the paper's epsilon. The first tensor argument names the device."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        device = next(a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)).device.type
        # meta tensors have no autocast (the tests run sync-free paths there, where a host read raises)
        if device == "meta" or not torch.is_autocast_enabled(device):
            return fn(*args, **kwargs)
        with torch.autocast(device, enabled=False):
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


@_full_precision
def squared_distances(z: Tensor, centers: Tensor) -> Tensor:
    r""":math:`C_{ik} = \|z_i - \mu_k\|^2` for ``z`` (n, p) and ``centers`` (K, p), returned as (n, K).

    Expanded as :math:`\|z\|^2 + \|\mu\|^2 - 2 z^\top \mu` to stay O(nK) in memory; the expansion can round
    slightly below zero, hence the clamp. In float32 at least (float64 if either is): embeddings in bfloat16 or
    float16, from a mixed-precision encoder, are promoted, with their gradient.
    """
    if z.dim() != 2 or centers.dim() != 2 or z.shape[1] != centers.shape[1]:
        raise ValueError(f"expected z (n, p) and centers (K, p), got {tuple(z.shape)} and {tuple(centers.shape)}")
    dtype = torch.promote_types(torch.promote_types(z.dtype, centers.dtype), torch.float32)
    z, centers = z.to(dtype), centers.to(dtype)
    sq = z.pow(2).sum(1, keepdim=True) + centers.pow(2).sum(1) - 2.0 * z @ centers.T  # (n, K)
    return sq.clamp_min(0.0)


class _Group:
    """Reductions over the ranks that each hold some rows of the cost; no-ops in a single process."""

    def __init__(self, distributed: bool) -> None:
        self.active = distributed and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        self.world_size = dist.get_world_size() if self.active else 1

    def sum(self, x: Tensor) -> Tensor:
        if self.active:
            x = x.clone()
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x

    def max(self, x: Tensor) -> Tensor:
        if self.active:
            x = x.clone()
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return x

    def logsumexp(self, x: Tensor) -> Tensor:
        """Elementwise log of the sum over ranks of exp(x): one all_gather, so the max-shift needs no second call."""
        if not self.active:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x.contiguous())
        return torch.logsumexp(torch.stack(parts), 0)


def _check_weights(w: Tensor | None, size: int, name: str, group: _Group, like: Tensor) -> tuple[Tensor, bool]:
    """Validate weights; ``group`` is the one the weights are split over (rows), a no-op one otherwise.

    Returns the weights in ``like``'s dtype and device, and whether any is zero. One host sync for given weights."""
    if w is None:
        total = size
        if group.active:  # every tensor entering a collective lives on the cost's device: NCCL has no CPU tensors
            total = group.sum(torch.tensor(float(size), dtype=torch.float64, device=like.device)).item()
        return torch.full((size,), 1.0 / total, dtype=like.dtype, device=like.device), False
    w = torch.as_tensor(w, device=like.device)
    if w.dim() != 1 or w.shape[0] != size:
        raise ValueError(f"`{name}` must have shape ({size},) to match the cost, got {tuple(w.shape)}")
    wd = w.detach().double()
    # min < 0 or NaN: negative or NaN entries; an infinite sum: an infinite entry.
    least, total = torch.stack([wd.min(), wd.sum()]).tolist()
    if not (least >= 0 and math.isfinite(total)):
        raise ValueError(f"`{name}` must be finite and non-negative, got min {least:.3g} and sum {total:.3g}")
    if group.active:
        total = group.sum(wd.sum()).item()
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"`{name}` must sum to 1 (within 1e-6), got {total:.9g}")
    return w.to(like.dtype), least == 0


def _work_dtype(cost: Tensor, epsilon: float, tol: float, group: _Group) -> torch.dtype:
    """float64 where float32 cannot resolve ``tol``; raises :class:`NonFiniteCostError` on NaN or inf. Both from
    max|C|, one host sync."""
    max_abs = cost.detach().abs().max().item()
    if not math.isfinite(max_abs):
        raise NonFiniteCostError("`cost` contains NaN or Inf")
    if cost.dtype == torch.float64:
        return torch.float64
    # An exponent (f + g - C) / eps computed in float32 is off by about spacing(max|C|) / eps, and so is
    # every plan entry relatively: once that exceeds tol, the marginals cannot reach tol in float32.
    if group.active:
        max_abs = group.max(cost.detach().abs().max().float().reshape(1)).item()
    spacing = torch.finfo(torch.float32).eps * max_abs
    return torch.float64 if spacing / epsilon > tol else torch.float32


def _epsilons(cost: Tensor, epsilon: float, scaling: bool, group: _Group) -> list[float]:
    """Decreasing epsilon stages ending at ``epsilon``; the first is on the scale of the cost's spread."""
    if not scaling:
        return [epsilon]
    spread = group.max(cost.max().reshape(1)).item() + group.max(-cost.min().reshape(1)).item()
    stages = [epsilon]
    while stages[-1] < spread:
        stages.append(stages[-1] / _SCALING_FACTOR)
    return stages[::-1]


def _unbalanced_factor(epsilon: float, reg_m: float | None) -> float:
    # The KL-relaxed column update is the balanced one times tau / (tau + eps) (Chizat et al. 2018, Prop. 2).
    return 1.0 if reg_m is None or math.isinf(reg_m) else reg_m / (reg_m + epsilon)


def _column_target(b: Tensor, g: Tensor, reg_m: float | None) -> Tensor:
    """Column marginal at the fixed point: ``b`` when balanced, ``b * exp(-g / tau)`` when unbalanced."""
    if reg_m is None or math.isinf(reg_m):
        return b
    return torch.where(b > 0, b * torch.exp(-g / reg_m), torch.zeros_like(b))


def _sinkhorn_inplace(cost, a, b, f, g, eps, iters, reg_m, group):
    """``iters`` log-domain Sinkhorn iterations without autograd, one exp of the (n, K) matrix each.

    The buffer holds the plan P = exp((f + g - C) / eps) after a row update, so P <= a <= 1: its column sums are
    the column log-sum-exp shifted by the old g, and the row update needs only P @ exp(dg / eps). Such a shift is
    unsafe when a mass is near underflow or a step is large; the iterations record that on the device, and the
    block is redone with max-shifted log-sum-exp updates if it happened on any rank. f, g in cost units.
    """
    dtype = cost.dtype
    log_a, log_b = a.log(), b.log()
    lam = _unbalanced_factor(eps, reg_m)
    tiny, max_step = _TINY[dtype], _MAX_LOG_STEP[dtype]
    buf = torch.empty_like(cost)  # (n, K), reused every iteration
    ones_n, ones_k = torch.ones_like(a)[:, None], torch.ones_like(b)[None, :]

    def exp_(x: Tensor) -> Tensor:
        return x.clamp_min_(_EXP_FLOOR[dtype]).exp_()

    def log_plan(f: Tensor, g: Tensor) -> Tensor:  # (f_i + g_k - C_ik) / eps into buf, one pass over C
        return torch.addmm(cost, torch.cat([f[:, None] / eps, ones_n], 1), torch.cat([ones_k, g[None, :] / eps], 0),
                           beta=-1.0 / eps, out=buf)

    def rows_safe(f: Tensor, g: Tensor) -> Tensor:  # max-shifted row update; leaves the new plan in buf
        shift = log_plan(f, g).amax(1, keepdim=True)  # (n, 1)
        row = exp_(buf.sub_(shift)).sum(1)  # (n,)
        buf.mul_((a / row)[:, None])
        return f + eps * (log_a - row.log() - shift[:, 0])

    f = rows_safe(f, g)
    if iters < 1:
        return f, g
    f0, g0 = f, g  # the block's start: f and g are never modified in place
    unsafe = torch.zeros((), dtype=torch.bool, device=cost.device)
    for _ in range(iters):
        col = group.sum(buf.sum(0))  # (K,) column marginal of the current plan
        g_new = lam * (eps * (log_b - col.clamp_min(tiny).log()) + g)
        step = (g_new - g) / eps  # (K,)
        row = buf @ step.clamp_max(max_step).exp()  # (n,) row sums of the plan with the new g
        unsafe |= (col <= tiny).any() | (step.max() > max_step) | (row <= tiny).any()
        g, f = g_new, f + eps * (log_a - row.clamp_min(tiny).log())
        exp_(log_plan(f, g))
    if not bool(group.max(unsafe.to(dtype).reshape(1)) > 0):  # the block's one host sync
        return f, g
    f, g = rows_safe(f0, g0), g0
    for _ in range(iters):  # column log-sum-exp of (f - C) / eps, max-shifted and reduced over ranks
        shift = group.max(log_plan(f, g).amax(0))  # (K,)
        lse = group.sum(exp_(buf.sub_(shift)).sum(0)).log() + shift - g / eps
        g = lam * eps * (log_b - lse)
        f = rows_safe(f, g)
    return f, g


def _sinkhorn_autograd(cost, a, b, f, g, eps, iters, reg_m):
    """The iterations of :func:`_sinkhorn_inplace` with plain log-sum-exp, so autograd can unroll them."""
    log_a, log_b = a.log(), b.log()
    lam = _unbalanced_factor(eps, reg_m)
    f = eps * (log_a - torch.logsumexp((g[None, :] - cost) / eps, 1))
    for _ in range(iters):
        g = lam * eps * (log_b - torch.logsumexp((f[:, None] - cost) / eps, 0))
        f = eps * (log_a - torch.logsumexp((g[None, :] - cost) / eps, 1))
    return f, g


def _newton(cost, a, b, g, eps, max_steps, tol, reg_m, group):
    r"""Maximise the semi-dual :math:`F(g) = \langle a, f(g) \rangle + \langle b, g \rangle` over g alone.

    :math:`f(g)` is Sinkhorn's exact row update, so every iterate's plan has rows ``a``;
    :math:`\nabla F = b - q` with q the plan's column sums, and :math:`-\epsilon\nabla^2 F = \mathrm{diag}(q) -
    P^\top \mathrm{diag}(1/a) P`, a (K, K) graph Laplacian. Sinkhorn's column update is a diagonal approximation
    of this Newton step, hence its crawl at small epsilon (Brauer et al. 2017, "A Sinkhorn-Newton method").
    Unbalanced: :math:`F` gets :math:`-\tau\langle b, e^{-g/\tau} - 1\rangle` instead of :math:`\langle b, g\rangle`.
    Levenberg-Marquardt damping keeps each step an ascent step (and fixes the gauge). Out-of-place, for autograd.
    """
    log_a = a.log()
    balanced = reg_m is None or math.isinf(reg_m)
    floor = _EXP_FLOOR[cost.dtype]

    def evaluate(g: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[Tensor, Tensor, Tensor]]:
        log_kernel = (g[None, :] - cost) / eps  # (n, K)
        shift = log_kernel.detach().amax(1, keepdim=True)  # (n, 1)
        kernel = torch.exp((log_kernel - shift).clamp_min(floor))  # floor: see _EXP_FLOOR
        row = kernel.sum(1)  # (n,)
        f = eps * (log_a - row.log() - shift[:, 0])
        plan = kernel * (a / row)[:, None]  # (n, K), rows sum to a
        dual = (b * g).sum() if balanced else -reg_m * (b * torch.expm1(-g / reg_m)).sum()
        grad = _column_target(b, g, reg_m) - group.sum(plan.sum(0))  # (K,) ascent direction
        # F's two terms and the marginal error, left on the device for the caller to read with its own values.
        return f, plan, g, grad, (group.sum((a * f).sum().detach()), dual.detach(), grad.detach().abs().sum())

    # Host reads: on an accelerator every read stalls the queue, so a trial's values come back in one copy and a
    # failed factorisation's trial is computed and dropped; on the CPU a read is free and stacking is not.
    eager = cost.device.type == "cpu"

    def read(*values: Tensor) -> list[float]:  # 0-d tensors of one dtype
        return [v.item() for v in values] if eager else torch.stack(values).tolist()

    f, plan, g, grad, stats = evaluate(g)
    value_f, value_dual, err = read(*stats)
    value = value_f + value_dual
    damping, steps = 1e-6, 0
    while steps < max_steps:
        if err < tol:
            break
        steps += 1
        q = group.sum(plan.sum(0))
        hess = torch.diag(q) - group.sum(plan.T @ (plan / a[:, None]))  # (K, K), PSD
        if not balanced:
            hess = hess + torch.diag(eps / reg_m * _column_target(b, g, reg_m))
        eye = torch.eye(len(q), dtype=q.dtype, device=q.device) * q.detach().max()
        while True:
            chol, info = torch.linalg.cholesky_ex(hess + damping * eye)
            if not (eager and info.item()):  # on the CPU a failed factorisation skips its trial
                # Two triangular solves: several times faster than torch.cholesky_solve on CPU for one right-hand side.
                half = torch.linalg.solve_triangular(chol, grad[:, None], upper=False)
                direction = eps * torch.linalg.solve_triangular(chol.mT, half, upper=True)[:, 0]  # (K,)
                trial = evaluate(g + direction)
                values = [(grad * direction).sum().detach(), *trial[4]]
                if not eager:  # whether the factorisation succeeded comes back with the trial's values
                    values.append((info == 0).to(grad.dtype))
                slope, trial_f, trial_dual, new_err, *factored = read(*values)
                ok = all(factored)  # on the CPU nothing to read: a failed factorisation never got here
                trial_value = trial_f + trial_dual
                # Near the optimum F changes below its rounding: a lower error with F level counts as progress.
                rounding = _F_ROUNDING[cost.dtype] * (1.0 + abs(value))
                if ok and (trial_value >= value + 1e-4 * slope or (new_err < err and trial_value >= value - rounding)):
                    f, plan, g, grad = trial[:4]
                    value, err = trial_value, new_err
                    # Relax by 3, not 10: with nearly hard plans /10 undershoots the next step's damping.
                    damping = max(damping / 3.0, 1e-12)
                    break
            damping *= 10.0
            if damping > 1e12:  # no ascent step left at this precision: report the error reached
                return plan, f, g, steps, err
    return plan, f, g, steps, err


def _solve(cost, a, b, f, g, epsilons, max_iter, tol, check_every, reg_m, group, differentiable):
    """Sinkhorn through the epsilon stages (``check_every`` iterations at the target), then Newton steps."""
    n_iter = 0
    for stage, eps in enumerate(epsilons):
        iters = min(check_every if stage == len(epsilons) - 1 else _STAGE_ITERS, max_iter - n_iter)
        if differentiable:
            f, g = _sinkhorn_autograd(cost, a, b, f, g, eps, iters, reg_m)
        else:
            f, g = _sinkhorn_inplace(cost, a, b, f, g, eps, iters, reg_m, group)
        n_iter += iters
    plan, f, g, steps, err = _newton(cost, a, b, g, epsilons[-1], max_iter - n_iter, tol, reg_m, group)
    return plan, f, g, n_iter + steps, err


def check_epsilon(epsilon: float) -> None:
    """The entropic regularisation's one check (the solvers' and the losses'): a finite number > 0."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"`epsilon` must be a finite number > 0, got {epsilon!r}")


def check_reg_m(reg_m: float | None) -> None:
    """The marginal relaxation's one check: > 0, or None for balanced OT."""
    if reg_m is not None and not reg_m > 0:
        raise ValueError(f"`reg_m` must be > 0 (or None for balanced OT), got {reg_m!r}")


@_full_precision
def sinkhorn(
    cost: Tensor,
    a: Tensor | None = None,
    b: Tensor | None = None,
    *,
    epsilon: float,
    max_iter: int = 1000,
    tol: float = 1e-6,
    check_every: int = 10,
    reg_m: float | None = None,
    f_init: Tensor | None = None,
    g_init: Tensor | None = None,
    epsilon_scaling: bool = True,
    distributed: bool = False,
    warn: bool = True,
    dtype: torch.dtype | None = None,
) -> SinkhornResult:
    r"""Entropic OT plan between weights ``a`` on the rows and ``b`` on the columns of ``cost``.

    .. math::
        \min_{P \ge 0} \langle P, C \rangle + \epsilon \sum_{ik} P_{ik}(\log P_{ik} - 1)
        + \tau \, \mathrm{KL}(P^\top \mathbf{1}_n \,|\, b)
        \quad \text{s.t.} \quad P \mathbf{1}_K = a

    and, when balanced (:math:`\tau = \infty`, ``reg_m=None``), :math:`P^\top \mathbf{1}_n = b`. The plan is
    :math:`P_{ik} = \exp((f_i + g_k - C_{ik}) / \epsilon)` and Sinkhorn alternates
    :math:`g \leftarrow \frac{\tau}{\tau + \epsilon}\,\epsilon(\log b - \mathrm{LSE}_i((f_i - C_{ik}) / \epsilon))` and
    :math:`f \leftarrow \epsilon(\log a - \mathrm{LSE}_k((g_k - C_{ik}) / \epsilon))` (Cuturi 2013; Chizat et al.
    2018 for the factor). :math:`\tau \to 0` gives :math:`g = 0`, the row-softmax plan of the paper's
    Proposition 2.

    Numerics: log-domain updates, so any cost scale and epsilon work; where float32 cannot resolve ``tol`` (its
    spacing at max|C| over epsilon) the solve runs in float64, and results come back in ``cost``'s dtype. Without a
    warm start, epsilon scaling halves epsilon from the cost's spread; at the target, ``check_every`` iterations are
    followed by damped Newton steps on g (:func:`_newton`), each checking the error. Rows are always exact.

    Args:
        cost: (n, K) cost, finite. With ``distributed``, this rank's rows of the global cost.
        a: (n,) row weights, non-negative; default uniform ``1/N`` over the global number of rows.
        b: (K,) column weights (cluster proportions), non-negative, summing to 1; default ``1/K``.
        epsilon: entropic regularisation, > 0, in cost units.
        max_iter: cap on Sinkhorn iterations plus Newton steps, all stages together.
        tol: target L1 error of the column marginal (of its fixed point ``b * exp(-g / tau)`` if unbalanced).
        check_every: Sinkhorn iterations at the target epsilon before the first error check.
        reg_m: unbalanced strength tau of the KL penalty on the column marginal; None for balanced.
        f_init, g_init: warm-start potentials (n,), (K,) in cost units, e.g. the previous batch's ``g``;
            any constant shift of a balanced ``g`` is fine. A warm start turns epsilon scaling off.
        epsilon_scaling: anneal epsilon from the cost's spread (ignored with a warm start).
        distributed: with several processes each holds its own rows; column updates and the error are reduced
            over ranks, so each rank gets its rows of the single-process plan, and the same ``g``.
        warn: emit a ``RuntimeWarning`` if the tolerance is not reached.
        dtype: the working precision; None picks float64 when float32 cannot resolve ``tol`` (above). Forced
            float32 leaves the error at float32's floor.

    Returns:
        :class:`SinkhornResult`; differentiable (unrolled) if ``cost`` requires grad and grad is enabled.

    Raises:
        ValueError: bad shapes, a non-finite cost, ``epsilon <= 0``, weights of the wrong length,
            negative, or not summing to 1 within 1e-6.

    Example:
        >>> cost = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
        >>> sinkhorn(cost, epsilon=0.1).plan.round(decimals=3)
        tensor([[0.5000, 0.0000],
                [0.0000, 0.5000]])
    """
    if cost.dim() != 2 or not cost.is_floating_point():
        raise ValueError(f"`cost` must be a 2-D floating tensor, got shape {tuple(cost.shape)} and {cost.dtype}")
    check_epsilon(epsilon)
    check_reg_m(reg_m)
    if max_iter < 1 or check_every < 1 or not tol > 0:
        raise ValueError(f"need max_iter >= 1, check_every >= 1, tol > 0; got {max_iter}, {check_every}, {tol}")
    group = _Group(distributed)
    differentiable = torch.is_grad_enabled() and cost.requires_grad
    if differentiable and group.active:
        raise ValueError("unrolled gradients need the whole batch in one process; detach the cost "
                         "(or use gradient='envelope') with distributed=True")
    n, k = cost.shape
    # On a GPU each host sync stalls the queue, so the checks below read back together and default weights need none.
    work_dtype = _work_dtype(cost, epsilon, tol, group)  # also raises on a non-finite cost
    dtype = work_dtype if dtype is None else dtype
    a, a_zero = _check_weights(a, n, "a", group, cost)
    b, b_zero = _check_weights(b, k, "b", _Group(False), cost)  # every rank holds all of b
    n_total = int(group.sum(torch.tensor(float(n), device=cost.device)).item()) if group.active else n
    if n_total < k:
        warnings.warn(f"fewer points ({n_total}) than clusters ({k}): some clusters must share points",
                      RuntimeWarning, stacklevel=2)

    work, a_s, b_s = cost.to(dtype), a.detach().to(dtype), b.detach().to(dtype)
    f0 = work.new_zeros(n) if f_init is None else f_init.detach().to(dtype)
    g0 = work.new_zeros(k) if g_init is None else g_init.detach().to(dtype)
    support = a_zero or b_zero
    if support:  # zero weights would put log(0) in the updates: solve on the support, pad with zero mass
        rows, cols = torch.nonzero(a > 0)[:, 0], torch.nonzero(b > 0)[:, 0]
        work, a_s, b_s, f0, g0 = work[rows][:, cols], a_s[rows], b_s[cols], f0[rows], g0[cols]  # (n', K'), ...
    warm = f_init is not None or g_init is not None
    epsilons = _epsilons(work.detach(), epsilon, epsilon_scaling and not warm, group)
    with torch.set_grad_enabled(differentiable):
        plan, f, g, n_iter, err = _solve(work, a_s, b_s, f0, g0, epsilons, max_iter, tol, check_every, reg_m,
                                         group, differentiable)
    if reg_m is None or math.isinf(reg_m):
        shift = (b_s * g).sum()  # gauge: <b, g> = 0, so that g is comparable across batches
        f, g = f + shift, g - shift
    converged = err < tol
    if warn and not converged:
        warnings.warn(
            f"Sinkhorn did not converge: column marginal error {err:.3g} > tol {tol:g} after {n_iter} "
            f"iterations (epsilon={epsilon:g}, max_iter={max_iter}, cost max {cost.max().item():.3g}); "
            "raise max_iter or epsilon, or loosen tol.", RuntimeWarning, stacklevel=2)
    if support:
        plan = plan.new_zeros(n, k).index_put((rows[:, None], cols[None, :]), plan)
        f = f.new_full((n,), -math.inf).index_put((rows,), f)
        g = g.new_full((k,), -math.inf).index_put((cols,), g)
    out = cost.dtype
    return SinkhornResult(plan.to(out), f.to(out), g.to(out), n_iter, err, converged)


@_full_precision
def sinkhorn_algorithm1(cost: Tensor, b: Tensor | None = None, *, epsilon: float, n_iter: int) -> SinkhornResult:
    r"""The paper's Algorithm 1 as written: ``n_iter`` Sinkhorn iterations from :math:`b = \mathbf{1}_K`, no stopping rule.

    .. math::
        a \leftarrow \frac{\mathbf{1}_n / n}{M b}, \quad b \leftarrow \frac{w}{M^\top a}, \quad
        M = e^{-C/\epsilon}, \quad P = \mathrm{diag}(a) M \mathrm{diag}(b),

    run in the log domain: :func:`sinkhorn_fixed` from a cold start (the kernel form underflows in float32 once
    :math:`C/\epsilon > 87`). The column update comes last, so the cluster sizes are exactly ``b`` and the rows
    loose. No warm start, epsilon scaling or Newton steps. Differentiable by autograd; single process.

    Args:
        cost: (n, K) cost, finite. b: (K,) cluster proportions w, positive, summing to 1; default ``1/K``.
        epsilon: entropic regularisation, > 0. n_iter: the number of iterations (the paper's :math:`n_{iter}`), >= 1.

    Returns:
        :class:`SinkhornResult` with ``marginal_error`` the L1 error of the *row* marginal (the loose one here),
        ``converged`` whether it is below 1e-5, and ``g`` in the gauge :math:`\langle b, g \rangle = 0`.
    """
    if cost.dim() != 2 or not cost.is_floating_point():
        raise ValueError(f"`cost` must be a 2-D floating tensor, got shape {tuple(cost.shape)} and {cost.dtype}")
    if not torch.isfinite(cost).all():
        raise NonFiniteCostError("`cost` contains NaN or Inf")
    check_epsilon(epsilon)
    b, b_zero = _check_weights(b, cost.shape[1], "b", _Group(False), cost)
    if b_zero:
        raise ValueError("`b` must be positive for Algorithm 1 (a zero proportion makes log(b) -inf)")
    res = sinkhorn_fixed(cost, b, None, epsilon=epsilon, n_iter=n_iter)
    err = float(res.marginal_error)
    return SinkhornResult(res.plan, res.f, res.g, n_iter, err, err < 1e-5)


@_full_precision
def sinkhorn_fixed(cost: Tensor, b: Tensor | None = None, g_init: Tensor | None = None, *, epsilon: float,
                   n_iter: int, reg_m: float | None = None, distributed: bool = False) -> SinkhornResult:
    r"""``n_iter`` log-domain Sinkhorn iterations from the column potential ``g_init``, ending on the column update.

    .. math::
        f_i \leftarrow \epsilon\big(\log a_i - \mathrm{LSE}_k \tfrac{g_k - C_{ik}}{\epsilon}\big), \quad
        g_k \leftarrow \epsilon\big(\log b_k - \mathrm{LSE}_i \tfrac{f_i - C_{ik}}{\epsilon}\big),

    with :math:`a = \mathbf{1}_n / n` over all ranks' rows. The training solve: the column update comes last, so the
    cluster sizes are exactly ``b`` (as in the paper's Algorithm 1) and the rows loose; warm-started from the previous
    batch's g, a few iterations suffice (RESULTS.md). No host read at all, so a GPU never waits and the solve can be
    compiled or captured. Under DDP each column update is one ``all_gather`` of K values. Differentiable by autograd
    (single process).

    Args:
        cost: (n, K) finite cost, this rank's rows. b: (K,) proportions, default ``1/K``, not validated here (the
            system checks them once). g_init: (K,) warm start, default zeros. epsilon: > 0. n_iter: >= 1.
        reg_m: KL relaxation of the column marginal (then the sizes are not exact). distributed: rows over ranks.

    Returns:
        :class:`SinkhornResult` whose ``marginal_error`` is a 0-d tensor on the device, the L1 error of the *row*
        marginal (the loose one), ``n_iter`` the iterations run and ``converged`` always False (nothing was checked);
        balanced: g in the gauge :math:`\langle b, g\rangle = 0`.
    """
    if n_iter < 1:
        raise ValueError(f"`n_iter` must be >= 1, got {n_iter}")
    group = _Group(distributed)
    n, k = cost.shape
    b = cost.new_full((k,), 1.0 / k) if b is None else b.to(cost)
    g = cost.new_zeros(k) if g_init is None else g_init.detach().to(cost)
    total = group.sum(torch.tensor(float(n), dtype=cost.dtype, device=cost.device))  # on the device: no read
    log_a, log_b = -total.log(), b.log()
    lam = _unbalanced_factor(epsilon, reg_m)
    for _ in range(n_iter):
        f = epsilon * (log_a - torch.logsumexp((g - cost) / epsilon, 1))  # (n,)
        g = lam * epsilon * (log_b - group.logsumexp(torch.logsumexp((f[:, None] - cost) / epsilon, 0)))  # (K,)
    if lam == 1.0:
        shift = torch.where(b > 0, b * g, 0.0).sum()  # gauge <b, g> = 0; a zero proportion has g = -inf
        f, g = f + shift, g - shift
    plan = torch.exp((f[:, None] + g - cost) / epsilon)
    err = group.sum((plan.detach().sum(1) - log_a.exp()).abs().sum())
    return SinkhornResult(plan, f, g, n_iter, err, False)


class Solver(Protocol):
    """The signature every entry of :data:`SOLVERS` shares: the plan of ``cost`` (n, K) towards ``b`` (K,), from
    ``g_init`` (K,) where the solver takes one; each reads the settings it needs (``iters``: the fixed solve's count;
    ``max_iter``: the solve's cap and Algorithm 1's count; ``tol``)."""

    def __call__(self, cost: Tensor, b: Tensor | None, g_init: Tensor | None, *, epsilon: float, iters: int,
                 max_iter: int, tol: float, reg_m: float | None, distributed: bool, warn: bool) -> SinkhornResult: ...


def _solver_fixed(cost, b, g_init, *, epsilon, iters, max_iter, tol, reg_m, distributed, warn):
    return sinkhorn_fixed(cost, b, g_init, epsilon=epsilon, n_iter=iters, reg_m=reg_m, distributed=distributed)


def _solver_solve(cost, b, g_init, *, epsilon, iters, max_iter, tol, reg_m, distributed, warn):
    return sinkhorn(cost, None, b, epsilon=epsilon, max_iter=max_iter, tol=tol, reg_m=reg_m, g_init=g_init,
                    distributed=distributed, warn=warn)


def _solver_algorithm1(cost, b, g_init, *, epsilon, iters, max_iter, tol, reg_m, distributed, warn):
    if reg_m is not None or _Group(distributed).active:
        raise ValueError("solver='algorithm1' is the paper's balanced, single-process Sinkhorn: "
                         "use solver='solve' with reg_m or several processes")
    return sinkhorn_algorithm1(cost, b, epsilon=epsilon, n_iter=max_iter)


# The training solves by name (:class:`lit_otclust.losses.OTLoss`'s ``solver``): one signature, :class:`Solver`.
SOLVERS: dict[str, Solver] = {"fixed": _solver_fixed, "solve": _solver_solve, "algorithm1": _solver_algorithm1}
