"""The lab's self-labelling loss against independent references: POT's Sinkhorn for its targets, torch's
cross-entropy for its value, and the gradient it states."""

from __future__ import annotations

import numpy as np
import ot
import pytest
import torch
import torch.nn.functional as F

from lit_otclust.lab.selflabel import SelfLabelling


def _problem(seed: int = 0, m: int = 60, K: int = 4, p: int = 3):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(m, p, generator=g, dtype=torch.float64) * 0.5
    centers = torch.randn(K, p, generator=g, dtype=torch.float64) * 0.5
    w = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    return z, centers, w


def test_value_is_epsilon_times_the_kl_from_pots_plan():
    z, centers, w = _problem()
    eps = 0.1
    loss, stats = SelfLabelling(epsilon=eps, tol=1e-9)(z.float(), centers.float(), w.float())
    cost = ((z[:, None] - centers[None]) ** 2).sum(-1)
    plan = ot.sinkhorn(np.full(len(z), 1 / len(z)), w.numpy(), cost.numpy(), eps, numItermax=100000, stopThr=1e-12)
    targets = torch.as_tensor(plan) * len(z)
    entropy = -(targets * targets.clamp_min(1e-300).log()).sum(1).mean()
    expected = eps * (F.cross_entropy(-cost / eps, targets) - entropy)  # eps KL(T || q)
    assert float(loss) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)
    assert float(loss) >= 0
    assert 0 <= float(stats["plan_moved"]) <= 1


def test_gradient_is_the_plan_less_the_soft_assignment():
    """d loss / d z_i = (1/m) sum_k (T_ik - q_ik) 2 (z_i - mu_k), the plan's targets held fixed."""
    z, centers, w = _problem(1)
    eps = 0.2
    zz = z.float().requires_grad_(True)
    loss, _ = SelfLabelling(epsilon=eps, tol=1e-9)(zz, centers.float(), w.float())
    loss.backward()
    cost = ((z[:, None] - centers[None]) ** 2).sum(-1)
    plan = ot.sinkhorn(np.full(len(z), 1 / len(z)), w.numpy(), cost.numpy(), eps, numItermax=100000, stopThr=1e-12)
    diff = torch.as_tensor(plan) * len(z) - torch.softmax(-cost / eps, 1)  # (m, K)
    expected = 2 * (diff[:, :, None] * (z[:, None] - centers[None])).sum(1) / len(z)
    torch.testing.assert_close(zz.grad.double(), expected, rtol=1e-3, atol=1e-5)


def test_with_sizes_the_soft_assignment_already_meets_the_loss_is_its_minimum_zero():
    """When w equals the column sums of q, the plan is q itself (g = 0): T = q and the loss is 0."""
    z, centers, _ = _problem(2)
    eps = 0.3
    q = torch.softmax(-((z[:, None] - centers[None]) ** 2).sum(-1) / eps, 1)
    w = q.mean(0)
    loss, _ = SelfLabelling(epsilon=eps, tol=1e-9)(z.float(), centers.float(), w.float())
    assert float(loss) == pytest.approx(0.0, abs=1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        SelfLabelling(epsilon=0.0)
