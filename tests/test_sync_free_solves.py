"""The sync-free solves (``lit_otclust.ot.sync_free_solve``, ``benchmarks/bench_gpu_graph.py``'s damped one) (the CUDA-graph step issue #10's GPU goal needs):
fixed iterations and Newton trials decided on the device, so they must reach the plan POT computes, and the
batched trials must never move away from it."""

from __future__ import annotations

import ot as pot
import pytest
import torch

from benchmarks.bench_gpu_graph import fixed_solve
from lit_otclust.ot import sinkhorn, squared_distances, sync_free_solve as batched_solve
from _problems import _problem


@pytest.mark.parametrize("solve", [fixed_solve, batched_solve], ids=["damped", "batched"])
@pytest.mark.parametrize("epsilon", [0.5, 0.05])
def test_a_cold_sync_free_solve_is_pots_plan(solve, epsilon):
    z, centers, a, b = _problem(60, 6, 3)
    cost = squared_distances(z, centers)
    log_plan, g = solve(cost, a, b, torch.zeros(6, dtype=torch.float64), epsilon, 3, 30)
    ref = pot.sinkhorn(a, b, cost, epsilon, method="sinkhorn_log", stopThr=1e-13, numItermax=100_000)
    assert (log_plan.exp() - ref).abs().max().item() < 1e-9
    assert torch.allclose(log_plan.exp().sum(1), a, atol=1e-14)  # rows exact by construction


def _nearly_hard_problem():
    """A batch warm-started near a solution, as in training (the next batch's problem from this one's g), with plans
    nearly hard at this epsilon: where damped trials fail often and Newton gains little a trial."""
    z, centers, a, b = _problem(300, 10, 5, p=10)
    cost = squared_distances(z, centers) * 20
    solved = sinkhorn(cost, a, b, epsilon=0.01, tol=1e-12, max_iter=100_000)
    g0 = solved.g + 0.05 * torch.randn(10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return cost, a, b, g0, solved.plan


def test_batched_trials_only_lower_the_column_error_and_reach_the_solved_plan():
    cost, a, b, g0, plan = _nearly_hard_problem()
    errors = []
    for trials in range(0, 31, 2):  # at the target epsilon only: each trial keeps g or lowers the error
        log_plan, _ = batched_solve(cost, a, b, g0, 0.01, 3, trials, continuation=(1.0,))
        errors.append((log_plan.exp().sum(0) - b).abs().sum().item())
    assert all(later <= earlier for earlier, later in zip(errors, errors[1:])), errors
    log_plan, _ = batched_solve(cost, a, b, g0, 0.01, 3, 60, continuation=(1.0,))
    assert (log_plan.exp() - plan).abs().max().item() < 1e-8


def test_an_epsilon_continuation_ends_at_the_solved_plan():
    cost, a, b, g0, plan = _nearly_hard_problem()
    log_plan, _ = batched_solve(cost, a, b, g0, 0.01, 3, 36, continuation=(16.0, 4.0, 1.0))
    assert (log_plan.exp() - plan).abs().max().item() < 1e-9  # the last stage's plan, at the target epsilon
    with pytest.raises(ValueError, match="continuation must end at 1"):
        batched_solve(cost, a, b, g0, 0.01, 3, 12, continuation=(4.0, 2.0))


def test_adam_outside_the_graph_takes_the_same_steps():
    """SyncFreeStep with Adam's step after it (the form a graphed step inside Lightning's automatic optimisation
    takes) against Adam inside it, eagerly from the same state: the same parameters after a few steps."""
    from benchmarks.bench_gpu_graph import SyncFreeStep
    from lit_otclust.models import MLPAutoencoder

    x = torch.rand(120, 784, generator=torch.Generator().manual_seed(0))
    w = torch.full((4,), 0.25)
    params = {}
    for inside in (True, False):
        torch.manual_seed(0)
        model = MLPAutoencoder(latent_dim=4)
        centers = torch.nn.Parameter(torch.randn(4, 4, generator=torch.Generator().manual_seed(1)))
        opt = torch.optim.Adam([*model.parameters(), centers], lr=1e-3)
        step = SyncFreeStep(model, centers, opt, x, w, 40, 0.1, 0.05, 3, 8, adam_in_graph=inside)
        for start in (0, 40, 80, 0):
            step.idx.copy_(torch.arange(start, start + 40))
            opt.zero_grad(set_to_none=True)
            step()
            if not inside:
                step.update()
        params[inside] = [p.detach().clone() for p in [*model.parameters(), centers]]
    for a, b in zip(params[True], params[False]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
