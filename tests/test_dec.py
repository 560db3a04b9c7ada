"""DEC's loss (lit_otclust.lab.dec) against its paper: the value from the closed form of q and p, and the gradient
against DEC's Eq. (4), with the target held fixed as DEC does."""

import numpy as np
import pytest
import torch

from lit_otclust.lab.dec import DECLoss


def _reference(z: np.ndarray, mu: np.ndarray, w: np.ndarray, alpha: float):
    """q, p and the loss by the formulas of the module docstring, in numpy."""
    d2 = ((z[:, None, :] - mu[None, :, :]) ** 2).sum(-1)
    kernel = (1 + d2 / alpha) ** (-(alpha + 1) / 2)
    q = kernel / kernel.sum(1, keepdims=True)
    p = w * q**2 / q.sum(0)
    p /= p.sum(1, keepdims=True)
    return d2, q, p, (p * np.log(p / q)).sum() / len(z)


@pytest.mark.parametrize("alpha, uniform", [(1.0, True), (1.0, False), (3.0, False)])
def test_value_and_gradient_match_dec(alpha, uniform):
    rng = np.random.default_rng(0)
    z, mu = rng.normal(size=(40, 3)), rng.normal(size=(4, 3)) * 2
    w = np.full(4, 0.25) if uniform else np.array([0.4, 0.3, 0.2, 0.1])
    d2, q, p, expected = _reference(z, mu, w, alpha)
    zt = torch.tensor(z, requires_grad=True)
    mut = torch.tensor(mu, requires_grad=True)
    loss, stats = DECLoss(alpha)(zt, mut, torch.tensor(w))
    assert loss.item() == pytest.approx(expected, rel=1e-10)
    loss.backward()
    # DEC's Eq. (4): dL/dz_i = (alpha+1)/alpha sum_j (1 + d2_ij/alpha)^-1 (p_ij - q_ij)(z_i - mu_j), over m here
    coef = (alpha + 1) / alpha / (1 + d2 / alpha) * (p - q)  # (m, K)
    grad_z = (coef[:, :, None] * (z[:, None, :] - mu[None, :, :])).sum(1) / len(z)
    grad_mu = -(coef[:, :, None] * (z[:, None, :] - mu[None, :, :])).sum(0) / len(z)
    np.testing.assert_allclose(zt.grad.numpy(), grad_z, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(mut.grad.numpy(), grad_mu, rtol=1e-9, atol=1e-12)
    assert 0.0 <= float(stats["plan_moved"]) <= 1.0


def test_bad_alpha_names_the_setting():
    with pytest.raises(ValueError, match="alpha"):
        DECLoss(alpha=0.0)
