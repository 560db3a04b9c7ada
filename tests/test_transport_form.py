"""The transport form of the OT loss, <pi, C> with pi differentiated through Sinkhorn iterations, against second code
paths: POT's log-domain Sinkhorn plan, scipy's distances, finite differences, and the system's training step."""

from __future__ import annotations

import numpy as np
import ot as pot
import pytest
import torch
from scipy.spatial.distance import cdist

from lit_otclust.models import MLPAutoencoder
from lit_otclust.losses import ot_clustering_loss
from lit_otclust.system import DeepClustering
from _problems import _problem


def _pots_plan(z: torch.Tensor, centers: torch.Tensor, b: torch.Tensor, epsilon: float) -> tuple[np.ndarray, ...]:
    """POT's converged plan (n, K) and the cost (n, K) it was solved on, computed by scipy, not by our code."""
    cost = cdist(z.detach().numpy(), centers.detach().numpy(), "sqeuclidean")
    uniform = np.full(len(cost), 1.0 / len(cost))
    plan = pot.sinkhorn(uniform, b.numpy(), cost, epsilon, method="sinkhorn_log", stopThr=1e-14, numItermax=100_000)
    return plan, cost


@pytest.mark.parametrize("solver", ["solve", "fixed", "algorithm1"])
def test_the_transport_plan_is_pots_plan_and_the_loss_its_transport_cost(solver):
    """Converged, pi is POT's plan whatever solver placed the start; the loss is sum(pi * C) on scipy's distances,
    and the value form exceeds it by exactly the entropy term epsilon * sum P (log P - 1)."""
    z, centers, _, b = _problem(40, 6, 3)
    settings = dict(epsilon=0.3, max_iter=3000, tol=1e-13, solver=solver)
    loss, res = ot_clustering_loss(z, centers, b, form="transport", transport_iters=5, **settings)
    plan, cost = _pots_plan(z, centers, b, 0.3)
    np.testing.assert_allclose(res.plan.numpy(), plan, rtol=0, atol=1e-10)
    np.testing.assert_allclose(res.plan.sum(0).numpy(), b.numpy(), rtol=1e-12)  # ends on the column update
    np.testing.assert_allclose(loss.item(), (plan * cost).sum(), rtol=1e-9)
    value, _ = ot_clustering_loss(z, centers, b, **settings)
    np.testing.assert_allclose(value.item() - loss.item(), 0.3 * (plan * (np.log(plan) - 1.0)).sum(), rtol=1e-8)


def test_the_transport_gradient_is_the_finite_difference_one_in_centers_and_embeddings():
    """Autograd runs through the T iterations only, from the solved g held fixed; finite differences re-solve at each
    perturbed point. They agree because the iterations forget their start (and fail with T = 1, where they do not)."""
    z, centers, _, b = _problem(12, 3, 11, p=2)

    def loss(z, c, iters=30):
        return ot_clustering_loss(z, c, b, epsilon=1.0, tol=1e-13, form="transport", transport_iters=iters)[0]

    inputs = (z.clone().requires_grad_(True), centers.clone().requires_grad_(True))
    assert torch.autograd.gradcheck(loss, inputs)
    assert not torch.autograd.gradcheck(lambda z, c: loss(z, c, iters=1), inputs, raise_exception=False)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_the_systems_transport_step_is_the_librarys_loss():
    torch.manual_seed(0)
    module = DeepClustering(MLPAutoencoder(), num_clusters=4, epsilon=0.1, clustering_weight=0.25,
                            ot_loss_form="transport", transport_iters=7)
    module.centers.data.normal_()
    module.joint = True
    w, warm = torch.full((4,), 0.25), None
    for step in range(2):
        x = torch.rand(40, 784)
        z, x_hat = module.autoencoder(x)
        loss = module.training_step((x, torch.zeros(40, dtype=torch.long), torch.arange(40)), step)
        clust, res = ot_clustering_loss(z, module.centers, w, epsilon=0.1, g_init=warm, form="transport",
                                        transport_iters=7, tol=module.hparams.sinkhorn_tol)
        torch.testing.assert_close(loss, (x_hat - x).pow(2).sum(1).mean() + 0.25 * clust)
        torch.testing.assert_close(module.g_last, res.g)
        warm = res.g


def test_the_transport_form_refuses_what_it_does_not_support():
    z, centers, _, b = _problem(10, 2, 0)
    for kwargs, message in ((dict(distributed=True), "distributed=True"), (dict(reg_m=1.0), "reg_m"),
                            (dict(gradient="unrolled"), "gradient='unrolled'"), (dict(transport_iters=0), ">= 1")):
        with pytest.raises(ValueError, match=message):
            ot_clustering_loss(z, centers, b, epsilon=0.5, form="transport", **kwargs)
    with pytest.raises(ValueError, match="reg_m"):
        DeepClustering(MLPAutoencoder(), ot_loss_form="transport", reg_m=1.0)
    with pytest.raises(ValueError, match="ot_loss_form"):
        DeepClustering(MLPAutoencoder(), ot_loss_form="sharp")
    assert DeepClustering(MLPAutoencoder()).hparams.ot_loss_form == "value"  # today's loss stays the default


def test_a_zero_proportion_stays_empty_with_finite_gradients():
    z, centers, _, _ = _problem(30, 3, 5)
    z.requires_grad_(True)
    loss, res = ot_clustering_loss(z, centers, torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64), epsilon=0.1,
                                   form="transport")
    loss.backward()
    assert res.plan[:, 2].abs().max().item() == 0.0 and torch.isfinite(z.grad).all()
