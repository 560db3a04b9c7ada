"""How close the sync-free solves of ``bench_gpu_graph`` get to the plan's marginals, trial by trial, on the costs
training produces: the accuracy half of issue #10's 2-minute GPU goal, measurable on a CPU.

    python -m benchmarks.bench_sync_free_solve --data-dir ../shared/data [--steps 233] [--ckpt CKPT]

A graph-replayed step cannot stop when the solve has converged, so it runs a fixed number of Sinkhorn iterations
and Newton trials, and each costs time on every step: on an H100 ~0.05 ms an iteration and ~0.16 ms a trial, the
rest of the step ~0.47 ms (``benchmarks/results/gpu_check_2026-11-26_h100.txt``), so 2 minutes for 200 MNIST
epochs (~2.5 ms a step) leave ~12 trials. This records the problems of a training trajectory: ``--steps`` steps of
the bare loop from the k-means initialisation (the MNIST autoencoder, lambda 1/300, epsilon 1e-2, each solve to 1e-5
warm-started from the last, as ``fit``), each step's cost (300, 10) and warm start g; with ``--ckpt``, also seeded
batches of a trained checkpoint's embedding in sequence (late training: the plans nearly hard). Then it solves every
problem with each solver at a range of trial counts from the same warm start and prints the largest and the 99th
percentile of the plans' column L1 errors (rows are exact by construction; ``fit`` solves to 1e-5):

- ``damped``: ``bench_gpu_graph.fixed_solve``, the damped Newton trials decided on the device (the script's step);
- ``batched``: ``bench_gpu_graph.batched_solve``, each trial's Newton step at 5 dampings (one batched Cholesky)
  and 5 step lengths, the 25 candidates evaluated together, the best kept;
- ``batched, (16, 4, 1)``: the same trials split over epsilon x 16, x 4, then epsilon (a continuation).

float64, 1 thread; solver time on the CPU is not the point (a GPU replays these as launches).
"""

from __future__ import annotations

import argparse

import torch
from sklearn.cluster import KMeans

from benchmarks.bare_loop import load
from benchmarks.bench_gpu_graph import batched_solve, fixed_solve
from lit_otclust.models import MLPAutoencoder
from lit_otclust.ot import ot_clustering_loss, squared_distances


def trajectory(x: torch.Tensor, steps: int, eps: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` training steps of the bare loop from the k-means init; each step's (cost (m, K), warm g (K,))."""
    torch.manual_seed(0)
    model = MLPAutoencoder()
    with torch.no_grad():
        z = torch.cat([model.encoder(xb) for xb in x.split(10_000)])
    km = KMeans(10, n_init=3, random_state=0).fit(z[:20_000].double().numpy())
    centers = torch.nn.Parameter(torch.as_tensor(km.cluster_centers_, dtype=torch.float32))
    opt = torch.optim.Adam([*model.parameters(), centers], lr=1e-3)
    w = torch.full((10,), 0.1)
    g, problems = torch.zeros(10), []
    for idx in torch.randperm(len(x))[: 300 * steps].split(300):
        xb = x[idx]
        z, x_hat = model(xb)
        problems.append((squared_distances(z, centers).detach().double(), g.double().clone()))
        clust, res = ot_clustering_loss(z, centers, w, epsilon=eps, tol=1e-5, g_init=g if len(problems) > 1 else None)
        g = res.g.detach().float()
        loss = (x_hat - xb).pow(2).sum(1).mean() + clust / 300
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return problems


def trained(ckpt: str, x: torch.Tensor, batches: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], float]:
    """Seeded batches of a trained checkpoint's embedding, each warm-started from the previous solve's g."""
    from benchmarks.bench_warm_sinkhorn import trained_costs
    from lit_otclust.ot import sinkhorn

    module, costs = trained_costs(ckpt, x, batches)
    eps = module.hparams.epsilon
    g, problems = module.g_last.double().clone(), []
    for cost in costs:
        cost = cost.double()
        problems.append((cost, g.clone()))
        g = sinkhorn(cost, b=module.proportions.double(), epsilon=eps, tol=1e-9, max_iter=10_000, g_init=g,
                     warn=False).g
    return problems, eps


def column_errors(solve, problems, eps: float) -> torch.Tensor:
    a = torch.full((300,), 1 / 300, dtype=torch.float64)
    b = torch.full((10,), 0.1, dtype=torch.float64)
    errs = []
    with torch.no_grad():
        for cost, g in problems:
            log_plan, _ = solve(cost, a, b, g, eps)
            errs.append((log_plan.exp().sum(0) - b).abs().sum())
    return torch.stack(errs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--steps", type=int, default=233, help="training steps recorded (one MNIST epoch: 233)")
    parser.add_argument("--ckpt", default=None, help="a trained MNIST checkpoint: its batches as a second set")
    parser.add_argument("--batches", type=int, default=100, help="the checkpoint's batches")
    parser.add_argument("--iters", type=int, default=3, help="Sinkhorn iterations before the trials")
    parser.add_argument("--trials", type=int, nargs="+", default=[2, 4, 6, 8, 12, 16, 30])
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, _ = load("mnist", args.data_dir)
    title = f"training from the k-means init, {args.steps} steps, epsilon 0.01"
    sets = [(title, trajectory(x, args.steps, 1e-2), 1e-2)]
    if args.ckpt:
        problems, eps = trained(args.ckpt, x, args.batches)
        sets.append((f"{args.ckpt}, {args.batches} batches, epsilon {eps:g}", problems, eps))
    solvers = {
        "damped": lambda t: lambda c, a, b, g, e: fixed_solve(c, a, b, g, e, args.iters, t),
        "batched": lambda t: lambda c, a, b, g, e: batched_solve(c, a, b, g, e, args.iters, t),
        "batched, (16, 4, 1)": lambda t: lambda c, a, b, g, e: batched_solve(c, a, b, g, e, args.iters, t,
                                                                             continuation=(16.0, 4.0, 1.0)),
    }
    for title, problems, eps in sets:
        print(f"{title}: largest / 99th percentile column L1 error after {args.iters} Sinkhorn iterations and T trials")
        print(f"  {'solver':20s} " + " ".join(f"{'T = ' + str(t):>19s}" for t in args.trials))
        for name, make in solvers.items():
            cells = []
            for t in args.trials:
                err = column_errors(make(t), problems, eps)
                cells.append(f"{err.max().item():.1e} / {err.quantile(0.99).item():.1e}")
            print(f"  {name:20s} " + " ".join(f"{c:>19s}" for c in cells))


if __name__ == "__main__":
    main()
