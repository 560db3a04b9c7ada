"""The training solve (a fixed number of Sinkhorn iterations) and DKM's soft k-means form, each against a second
code path: POT's Sinkhorn-Knopp, the solve to tolerance, a finite-difference gradient, a closed form."""

from __future__ import annotations

import numpy as np
import ot as pot
import pytest
import torch

from lit_otclust.losses import ot_clustering_loss, soft_kmeans_loss
from lit_otclust.sinkhorn import sinkhorn, sinkhorn_fixed, squared_distances
from _problems import _problem


@pytest.mark.parametrize("n_iter", [1, 3, 10])
def test_fixed_solve_from_zero_is_pots_sinkhorn_knopp_on_the_transposed_problem(n_iter):
    """From g = 0 the fixed solve runs the paper's Algorithm 1 (rows, then columns): POT's sinkhorn_knopp on the
    transpose (clusters as its rows) runs the same iterates, so the plans agree after any n_iter; columns exact."""
    z, centers, _, b = _problem(30, 5, n_iter)
    cost = squared_distances(z, centers)
    ours = sinkhorn_fixed(cost, b, epsilon=0.5, n_iter=n_iter)
    a = np.full(30, 1.0 / 30)
    ref = pot.sinkhorn(b.numpy(), a, cost.T.numpy(), 0.5, method="sinkhorn", numItermax=n_iter, stopThr=0.0,
                       warn=False)
    np.testing.assert_allclose(ours.plan.T.numpy(), ref, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(ours.plan.sum(0).numpy(), b.numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours.marginal_error.item(), np.abs(ref.sum(0) - a).sum(), rtol=1e-8)
    assert abs((b * ours.g).sum().item()) < 1e-12  # the gauge <b, g> = 0


def test_fixed_solve_converges_to_pots_plan_and_a_warm_start_at_the_optimum_stays_there():
    z, centers, a, b = _problem(40, 6, 3)
    cost = squared_distances(z, centers)
    uniform = torch.full((40,), 1.0 / 40, dtype=torch.float64)
    ref = torch.as_tensor(pot.sinkhorn(uniform.numpy(), b.numpy(), cost.numpy(), 0.3, method="sinkhorn_log",
                                       stopThr=1e-14, numItermax=100_000))
    cold = sinkhorn_fixed(cost, b, epsilon=0.3, n_iter=2000)
    assert (cold.plan - ref).abs().max().item() < 1e-10
    solved = sinkhorn(cost, None, b, epsilon=0.3, tol=1e-13)
    warm = sinkhorn_fixed(cost, b, solved.g, epsilon=0.3, n_iter=1)
    assert (warm.plan - solved.plan).abs().max().item() < 1e-10 and warm.marginal_error.item() < 1e-10
    few_cold = sinkhorn_fixed(cost, b, epsilon=0.3, n_iter=1)
    assert few_cold.marginal_error.item() > 1e-4  # so the warm start is what made one iteration enough


def test_fixed_solve_gradients_envelope_at_convergence_and_unrolled_by_finite_differences():
    z, centers, _, b = _problem(40, 4, 7)
    centers.requires_grad_(True)
    grads = {}
    for solver, n in (("fixed", 3000), ("solve", 1000)):
        loss, _ = ot_clustering_loss(z, centers, b, epsilon=1.0, iters=n, max_iter=n, tol=1e-13, solver=solver)
        grads[solver] = torch.autograd.grad(loss, centers)[0]
    torch.testing.assert_close(grads["fixed"], grads["solve"], rtol=1e-8, atol=1e-10)
    assert torch.autograd.gradcheck(
        lambda c: ot_clustering_loss(z, c, b, epsilon=1.0, gradient="unrolled", iters=3, solver="fixed")[0],
        (centers.detach().clone().requires_grad_(True),))


def test_fixed_solve_reads_nothing_back_to_the_host():
    """On the meta device every value is unknown, so any host read (.item(), a branch on a tensor) raises: the fixed
    solve and its loss run there to the end, the solve to tolerance does not."""
    cost = torch.empty(300, 10, device="meta")
    z, centers = torch.empty(300, 10, device="meta"), torch.empty(10, 10, device="meta", requires_grad=True)
    b = torch.full((10,), 0.1, device="meta")
    res = sinkhorn_fixed(cost, b, torch.zeros(10, device="meta"), epsilon=0.01, n_iter=10)
    assert res.plan.shape == (300, 10) and res.marginal_error.device.type == "meta"
    loss, _ = ot_clustering_loss(z, centers, b, epsilon=0.01, iters=10, solver="fixed")
    loss.backward()
    assert centers.grad.shape == (10, 10)
    with pytest.raises((RuntimeError, NotImplementedError)):
        sinkhorn(cost, None, b, epsilon=0.01)


def test_fixed_solve_keeps_a_zero_proportion_empty_and_finite_elsewhere():
    z, centers, _, _ = _problem(30, 3, 5)
    b = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    res = sinkhorn_fixed(squared_distances(z, centers), b, epsilon=0.5, n_iter=5)
    assert torch.isfinite(res.plan).all() and res.plan[:, 2].abs().max().item() == 0.0
    assert torch.isfinite(res.g[:2]).all() and torch.isfinite(res.f).all()


def test_expected_soft_kmeans_is_dkms_expected_distance_with_its_finite_difference_gradient():
    z, centers, _, _ = _problem(25, 4, 11)
    eps = 0.7
    cost = squared_distances(z, centers).numpy()
    soft = np.exp(-cost / eps - np.logaddexp.reduce(-cost / eps, axis=1, keepdims=True))
    expected = (soft * cost).sum(1).mean()
    assert np.isclose(soft_kmeans_loss(z, centers, epsilon=eps, form="expected").item(), expected, rtol=1e-12)
    for form in ("expected", "softmin"):
        assert torch.autograd.gradcheck(lambda zz, c: soft_kmeans_loss(zz, c, epsilon=eps, form=form),
                                        (z.clone().requires_grad_(True), centers.clone().requires_grad_(True)))
    # The forms differ in their gradient, not only by a constant: DKM's differentiates the softmax too.
    grads = {}
    for form in ("expected", "softmin"):
        c = centers.clone().requires_grad_(True)
        grads[form] = torch.autograd.grad(soft_kmeans_loss(z, c, epsilon=eps, form=form), c)[0]
    assert (grads["expected"] - grads["softmin"]).abs().max().item() > 1e-3
    with pytest.raises(ValueError, match="form"):
        soft_kmeans_loss(z, centers, epsilon=eps, form="dkm")


def _fixed_worker(rank, world_size, cost, b):
    rows = slice(rank * 45, (rank + 1) * 45)
    res = sinkhorn_fixed(cost[rows], b, epsilon=0.05, n_iter=7, distributed=True)
    return res.plan, res.g, res.marginal_error


@pytest.mark.distributed
@pytest.mark.slow
def test_fixed_solve_over_two_ranks_equals_one_process():
    from _dist import run_in_processes

    z, centers, _, b = _problem(90, 4, 16)
    cost = squared_distances(z, centers)
    single = sinkhorn_fixed(cost, b, epsilon=0.05, n_iter=7)
    out = run_in_processes(_fixed_worker, 2, cost, b)
    assert (torch.cat([plan for plan, _, _ in out]) - single.plan).abs().max().item() < 1e-12
    for _, g, err in out:
        assert torch.allclose(g, single.g, atol=1e-10) and torch.isclose(err, single.marginal_error, rtol=1e-9)
