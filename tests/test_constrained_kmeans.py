"""Size-constrained k-means (:func:`lit_otclust.clustering.constrained_kmeans`) against exact references: scipy's
assignment solver for the size-constrained assignment, POT's Sinkhorn for the entropic plan at the same centers, row
repetition for sample weights, and sklearn's k-means on blobs of unequal known shares."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans

import ot

from lit_otclust.clustering import constrained_kmeans, constrained_lloyd, impose, minibatch_step
from lit_otclust.metrics import hungarian_accuracy


def _blobs(shares: list[float], n: int, dim: int, separation: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit-variance Gaussian blobs of the given shares, centers at a mean distance ~``separation`` apart."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((len(shares), dim))
    centers *= separation / np.sqrt(2) / np.linalg.norm(centers, axis=1, keepdims=True).mean()
    y = np.repeat(np.arange(len(shares)), np.round(np.array(shares) * n).astype(int))
    return centers[y] + rng.standard_normal((len(y), dim)), y


def _scores(labels: np.ndarray, y: np.ndarray, k: int) -> tuple[float, float]:
    out = hungarian_accuracy(torch.as_tensor(labels), torch.as_tensor(y), k, k)
    return float(out["acc"]), float(out["size_error"])


def test_labels_are_the_exact_size_constrained_assignment_to_its_centers() -> None:
    """Center k carries w_k: at the centers, the labels have the sizes w_k n and cost what the exact assignment with
    those capacities costs (scipy's linear_sum_assignment, each center's column repeated w_k n times); and the
    labels are the potential rule's, argmin_k ||x - mu_k||^2 - g_k."""
    x, y = _blobs([0.5, 0.3, 0.2], 120, 4, 2.0, seed=0)
    w = np.bincount(y) / len(y)
    centers, g, labels = constrained_kmeans(torch.as_tensor(x), torch.as_tensor(w), n_init=4, epsilon=1e-3)
    cost = ((x[:, None, :] - centers.double().numpy()[None]) ** 2).sum(-1)  # (n, K)
    columns = np.repeat(np.arange(3), np.round(w * len(x)).astype(int))
    rows, cols = linear_sum_assignment(cost[:, columns])
    exact = cost[rows, columns[cols]].sum()
    ours = cost[np.arange(len(x)), labels.numpy()].sum()
    np.testing.assert_array_equal(np.bincount(labels.numpy(), minlength=3), np.round(w * len(x)).astype(int))
    assert ours == pytest.approx(exact, rel=1e-6)
    np.testing.assert_array_equal(labels.numpy(), (cost - g.double().numpy()).argmin(1))


@pytest.mark.slow
@pytest.mark.parametrize("dim,separation,seed", [(2, 3.0, 0), (10, 3.0, 0), (10, 3.0, 1), (50, 4.0, 0)])
def test_long_tailed_blobs_get_their_shares_and_at_least_kmeans_accuracy(dim: int, separation: float,
                                                                         seed: int) -> None:
    """Three overlapping blobs of 73 / 23 / 4 % (largest / smallest 18, geometric): k-means drifts towards equal
    sizes; told the shares, the clusters hold them (within 0.01, each cluster against its matched class) at an
    accuracy at or above k-means' (10 restarts)."""
    shares = [0.7296, 0.2307, 0.0397]
    x, y = _blobs(shares, 2000, dim, separation, seed)
    w = np.bincount(y) / len(y)
    km_acc, _ = _scores(KMeans(3, n_init=10, random_state=0).fit(x).labels_, y, 3)
    _, _, labels = constrained_kmeans(torch.as_tensor(x), torch.as_tensor(w))
    acc, size_error = _scores(labels.numpy(), y, 3)
    assert size_error <= 0.01 and acc >= km_acc - 0.005, (acc, km_acc, size_error)


@pytest.mark.slow
def test_no_swap_of_two_shares_lowers_the_transport_cost_of_the_result() -> None:
    """The swap search ends where it claims: from the returned centers, swapping the shares of any two centers and
    rerunning Lloyd's iterations (:func:`constrained_lloyd`, from g = 0 at its own scale s) costs at least the
    result, to 0.5% (the search screens swaps at the restart's s, and a swap rerun from other potentials or at another
    s can reach another local optimum: measured 0.1% lower here). On these five 2-d blobs of shares 10:1 (a data set
    of the estimator's family), the 10 restarts alone stop at a permutation one swap away from a cheaper one
    (accuracy 0.694, transport cost 1.94 against the search's 1.58): the search must find it."""
    shares = np.array([10.0 ** (-j / 4) for j in range(5)])
    x, y = _blobs(list(shares / shares.sum()), 2000, 2, 4.0, seed=1)
    X, w = torch.as_tensor(x), torch.as_tensor(np.bincount(y) / len(y))
    centers, _, labels = constrained_kmeans(X, w, n_init=10)
    ours, _, _ = constrained_lloyd(X, w, centers.double(), max_iter=0)
    for a in range(5):
        for b in range(a + 1, 5):
            swapped = w.clone()
            swapped[[a, b]] = w[[b, a]]
            other, _, _ = constrained_lloyd(X, swapped, centers.double())
            assert other >= ours * (1 - 5e-3), (a, b, other, ours)
    acc, size_error = _scores(labels.numpy(), y, 5)
    assert acc >= 0.84 and size_error <= 0.01, (acc, size_error)


def test_the_plan_at_fixed_centers_is_pots_sinkhorn() -> None:
    """At given centers (``max_iter=0``) the plan's transport cost and column potential g are POT's log-domain
    Sinkhorn's between the weights a and w on the same costs and epsilon (g up to a constant, float64)."""
    x, y = _blobs([0.6, 0.3, 0.1], 300, 3, 2.0, seed=2)
    w = np.array([0.5, 0.3, 0.2])  # not the classes' shares: the potentials have work to do
    a = np.random.default_rng(0).uniform(0.5, 2.0, len(x))
    centers = np.stack([x[y == k].mean(0) for k in range(3)])
    cost = ((x[:, None, :] - centers[None]) ** 2).sum(-1)  # (n, K)
    scale = 1.7
    ours, _, g = constrained_lloyd(torch.as_tensor(x), torch.as_tensor(w), torch.as_tensor(centers), epsilon=0.05,
                                   max_iter=0, scale=scale, sample_weight=torch.as_tensor(a))
    plan, log = ot.sinkhorn(a / a.sum(), w, cost, 0.05 * scale, method="sinkhorn_log", stopThr=1e-12,
                            numItermax=100_000, log=True)
    np.testing.assert_allclose(plan.sum(0), w, atol=1e-9)
    assert ours == pytest.approx(float((plan * cost).sum()), rel=1e-6)
    theirs = 0.05 * scale * log["log_v"]
    np.testing.assert_allclose(g.numpy() - g.numpy().mean(), theirs - theirs.mean(), atol=1e-6)


@pytest.mark.parametrize("weighted", [False, True])
def test_a_minibatch_step_moves_the_centers_by_pots_plan(weighted: bool) -> None:
    """partial_fit's step (:func:`minibatch_step`) at given centers: the batch's plan is POT's log-domain Sinkhorn
    between the rows (weights a) and w on the same costs, and each center moves by MiniBatchKMeans' rule with that
    plan's masses, mu_k + (sum_i P_ik x_i - m_k mu_k) / (c_k + m_k), the masses in rows (a weight of 2 is two rows)."""
    x, y = _blobs([0.6, 0.3, 0.1], 300, 3, 2.0, seed=5)
    w = np.array([0.5, 0.3, 0.2])
    rows = np.random.default_rng(1).integers(1, 4, len(x)).astype(float) if weighted else np.ones(len(x))
    centers = np.stack([x[y == k].mean(0) for k in range(3)]) + 0.2
    counts = np.array([100.0, 40.0, 10.0])
    eps = 0.5
    new, g, after = minibatch_step(torch.as_tensor(x), torch.as_tensor(w), torch.as_tensor(centers),
                                   torch.zeros(3, dtype=torch.float64), torch.as_tensor(counts), eps,
                                   sample_weight=torch.as_tensor(rows) if weighted else None)
    cost = ((x[:, None, :] - centers[None]) ** 2).sum(-1)  # (n, K)
    plan = ot.sinkhorn(rows / rows.sum(), w, cost, eps, method="sinkhorn_log", stopThr=1e-12, numItermax=100_000)
    plan *= rows.sum()  # in rows
    mass = plan.sum(0)  # (K,) = w * total rows
    expected = centers + (plan.T @ x - mass[:, None] * centers) / (counts + mass)[:, None]
    np.testing.assert_allclose(after.numpy(), counts + mass, atol=1e-4 * rows.sum())  # the solve: 1e-4 of the mass
    np.testing.assert_allclose(new.numpy(), expected, atol=1e-5)


def test_integer_sample_weights_are_repeated_rows() -> None:
    """Weights 1-3 on the rows give the centers, potentials and transport cost of the data with each row repeated
    that many times, from the same start at the same scale; and constrained_kmeans' labels hold w of the weight."""
    x, y = _blobs([0.5, 0.3, 0.2], 200, 4, 2.5, seed=3)
    counts = np.random.default_rng(1).integers(1, 4, len(x))
    w = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    start = torch.as_tensor(np.stack([x[y == k].mean(0) for k in range(3)])) + 0.3
    weighted = constrained_lloyd(torch.as_tensor(x), w, start, scale=2.0, sample_weight=torch.as_tensor(counts))
    repeated = constrained_lloyd(torch.as_tensor(np.repeat(x, counts, 0)), w, start, scale=2.0)
    assert weighted[0] == pytest.approx(repeated[0], rel=1e-9)
    torch.testing.assert_close(weighted[1], repeated[1], rtol=0, atol=1e-8)
    torch.testing.assert_close(weighted[2], repeated[2], rtol=0, atol=1e-8)
    _, _, labels = constrained_kmeans(torch.as_tensor(x), w, n_init=2, sample_weight=torch.as_tensor(counts))
    held = np.bincount(labels.numpy(), weights=counts, minlength=3) / counts.sum()
    assert np.abs(held - w.numpy()).max() <= 3 / counts.sum(), held


def test_impose_on_new_points_is_the_exact_capacitated_assignment() -> None:
    """``impose`` on points the centers were not fitted on: sizes w m exactly, at the cost of scipy's exact
    assignment with each center's column repeated w_k m times, and the labels are argmin_k ||x - mu_k||^2 - g_k."""
    x, _ = _blobs([0.4, 0.35, 0.25], 160, 5, 1.5, seed=4)
    centers = torch.as_tensor(x[:3] + 0.5)
    w = np.array([0.4, 0.35, 0.25])
    labels, g = impose(torch.as_tensor(x), centers, torch.as_tensor(w))
    cost = ((x[:, None, :] - centers.numpy()[None]) ** 2).sum(-1)
    sizes = np.round(w * len(x)).astype(int)
    np.testing.assert_array_equal(np.bincount(labels.numpy(), minlength=3), sizes)
    columns = np.repeat(np.arange(3), sizes)
    rows, cols = linear_sum_assignment(cost[:, columns])
    assert cost[np.arange(len(x)), labels.numpy()].sum() == pytest.approx(cost[rows, columns[cols]].sum(), rel=1e-9)
    np.testing.assert_array_equal(labels.numpy(), (cost - g.double().numpy()).argmin(1))


def test_a_large_fit_searches_on_a_sample_and_still_meets_the_shares() -> None:
    """n above ``search_rows``: the restarts and swaps run on a sample, Lloyd's iterations on all rows; the labels
    hold w (float32, within one row per cluster) and score at least k-means' accuracy on blobs of shares 10:1."""
    shares = np.array([10.0 ** (-j / 3) for j in range(4)])
    x, y = _blobs(list(shares / shares.sum()), 6000, 8, 3.0, seed=5)
    w = np.bincount(y) / len(y)
    _, _, labels = constrained_kmeans(torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(w), n_init=2,
                                      search_rows=1500)
    np.testing.assert_allclose(np.bincount(labels.numpy(), minlength=4) / len(y), w, atol=1.5 / len(y))
    acc, _ = _scores(labels.numpy(), y, 4)
    km_acc, _ = _scores(KMeans(4, n_init=2, random_state=0).fit(x).labels_, y, 4)
    assert acc >= km_acc - 0.005, (acc, km_acc)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_fit_is_the_cpus() -> None:
    """The same fit on a GPU: the centers within float32 rounding of the CPU's, the same sizes."""
    x, y = _blobs([0.5, 0.3, 0.2], 3000, 6, 3.0, seed=6)
    w = torch.as_tensor(np.bincount(y) / len(y))
    X = torch.as_tensor(x, dtype=torch.float32)
    cpu = constrained_kmeans(X, w, n_init=2)
    gpu = constrained_kmeans(X.cuda(), w, n_init=2)
    torch.testing.assert_close(gpu[0].cpu(), cpu[0], rtol=0, atol=1e-3)
    np.testing.assert_array_equal(np.bincount(gpu[2].cpu().numpy(), minlength=3),
                                  np.bincount(cpu[2].numpy(), minlength=3))
