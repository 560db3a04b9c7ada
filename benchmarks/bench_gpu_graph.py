"""A whole training step as one CUDA graph: the step issue #10's GPU goal (200 MNIST epochs in 2 minutes) needs.

    python -m benchmarks.bench_gpu_graph --data-dir ../shared/data [--device cuda] [--iters 10] [--epochs 3]

On the H200 a step of ``fit`` took 26 ms and the bare loop's 14.3 ms for 1.7 ms of GPU work: ~800 kernel launches
and ~60 host syncs a step (``benchmarks/results/gpu_check_2026-11-26_h200.txt``). Two minutes for 200 epochs of 233
steps leave ~2.5 ms a step, about what the autoencoder's step alone took eagerly (2.2 ms, launch-bound as well).
So the launches have to go. This measures the step a CUDA graph can replay, with no host sync anywhere in it:

- the batch gathered on the device through a static index buffer (each step copies its slice of the epoch's
  permutation in);
- the MNIST autoencoder, the reconstruction (summed over pixels, batch mean) + lambda * the OT loss, envelope gradient;
- Sinkhorn at a fixed number of log-domain iterations warm-started from the last step's g, float32, no convergence
  check: the fifth recipe round found 10 warm iterations as accurate as solving to 1e-5 (RESULTS.md, 5 seeds);
- Adam, fused, with ``capturable=True`` on CUDA.

Prints, over the same number of steps: the bare loop's step as ``fit`` solves it (``ot_clustering_loss`` to 1e-5),
the sync-free step run eagerly, the same step replayed as one graph; whether ``--check`` replayed steps equal as many
eager steps from the same state; the column error the fixed iterations leave; then ``--epochs`` epochs of training
through the graph, each with its wall time and accuracy (argmin over the centers, Hungarian match), and the
200-epoch estimate. On a CPU there are no graphs: it runs the two eager steps and the epochs eagerly, which checks
the script and measures the fixed-iteration step against the solved one there.
"""

from __future__ import annotations

import argparse
import functools
import time
import traceback

import torch
from sklearn.cluster import KMeans

from benchmarks.bare_loop import accuracy, load, train_steps
from lit_otclust.models import MLPAutoencoder
from lit_otclust.ot import _objective, sinkhorn, squared_distances, sync_free_solve


def fixed_solve(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, g: torch.Tensor, eps: float, iters: int,
                trials: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``sinkhorn``'s solve with every decision on the device: ``iters`` log-domain Sinkhorn iterations from the
    column potential ``g`` (K,), then ``trials`` damped Newton trials on the semi-dual (``ot._newton``'s), each
    accepted or rejected by ``torch.where`` and its damping moved the same way, instead of read back by the host.
    No stopping rule, so no host sync: converged trials only repeat the optimum. ``cost`` (n, K), ``a`` (n,),
    ``b`` (K,) positive. Returns the plan's log ``(f_i + g_k - C_ik) / eps`` (n, K), rows exact, and g (K,)."""
    log_a, log_b = a.log(), b.log()
    for _ in range(iters):
        f = eps * (log_a - torch.logsumexp((g - cost) / eps, 1))  # (n,)
        g = eps * (log_b - torch.logsumexp((f[:, None] - cost) / eps, 0))  # (K,)

    def evaluate(g: torch.Tensor) -> tuple[torch.Tensor, ...]:  # the row update at g and what Newton needs of it
        # Shifted to exact rows in log space, not rebuilt as (f + g - C) / eps: that sum cancels terms of ~100 and
        # divides the rounding by eps; tried, it left a step's column error at 1.4e-5 where this leaves 1.4e-7.
        log_plan = (g - cost) / eps  # (n, K)
        log_plan = log_plan + (log_a - torch.logsumexp(log_plan, 1))[:, None]
        plan = log_plan.exp()
        q = plan.sum(0)  # (K,) columns
        value = (a * eps * (log_plan[:, 0] - (g[0] - cost[:, 0]) / eps)).sum() + (b * g).sum()  # <a, f> + <b, g>
        return log_plan, plan, q, b - q, value, (b - q).abs().sum()

    log_plan, plan, q, grad, value, err = evaluate(g)
    damping = torch.full((), 1e-6, dtype=cost.dtype, device=cost.device)
    eye = torch.eye(len(b), dtype=cost.dtype, device=cost.device)
    for _ in range(trials):
        hess = torch.diag(q) - plan.T @ (plan / a[:, None])  # (K, K), PSD
        chol, info = torch.linalg.cholesky_ex(hess + damping * q.max() * eye)
        direction = eps * torch.cholesky_solve(grad[:, None], chol)[:, 0]  # (K,)
        trial = evaluate(g + direction)
        t_value, t_err = trial[4], trial[5]
        rounding = 1e-13 * (1.0 + value.abs())
        ok = (info == 0) & ((t_value >= value + 1e-4 * (grad * direction).sum())
                            | ((t_err < err) & (t_value >= value - rounding)))
        g = torch.where(ok, g + direction, g)
        log_plan, plan, q, grad, value, err = (torch.where(ok, new, old) for new, old in
                                               zip(trial, (log_plan, plan, q, grad, value, err)))
        damping = torch.where(ok, damping / 3.0, damping * 10.0).clamp(1e-12, 1e12)
    return log_plan, g



# The batched trials (5 dampings x 5 lengths a trial) live in the package now; the H200 of 2026-11-26b timed them
# with one Cholesky call a damping (that commit's --cholesky each).
batched_solve = sync_free_solve


class SyncFreeStep:
    """One training step whose every tensor has a fixed address and shape, so a CUDA graph can replay it.

    Reads the batch's indices from ``self.idx`` (m,); writes the parameters, Adam's state, the warm start ``self.g``
    (K,), the step's loss ``self.loss`` and the largest column L1 error of its plans ``self.col_err`` (0-d; zero it to
    start a count), all on the device.
    """

    def __init__(self, model: torch.nn.Module, centers: torch.Tensor, opt: torch.optim.Optimizer, x: torch.Tensor,
                 w: torch.Tensor, batch: int, lam: float, eps: float, iters: int, trials: int,
                 solve=None, adam_in_graph: bool = True) -> None:
        self.model, self.centers, self.opt, self.x, self.w = model, centers, opt, x, w
        self.adam_in_graph = adam_in_graph
        self.solve = solve or fixed_solve  # fixed_solve or batched_solve
        self.lam, self.eps, self.iters, self.trials = lam, eps, iters, trials
        dev = x.device
        self.idx = torch.zeros(batch, dtype=torch.long, device=dev)
        self.g = torch.zeros_like(w, dtype=torch.float64)
        self.loss = torch.zeros((), device=dev)
        self.col_err = torch.zeros((), device=dev)
        self.a = torch.full((batch,), 1.0 / batch, dtype=torch.float64, device=dev)

    def __call__(self) -> None:
        xb = self.x.index_select(0, self.idx)  # (m, d)
        z, x_hat = self.model(xb)
        recon = (x_hat - xb).pow(2).sum(1).mean()
        cost = squared_distances(z, self.centers)  # (m, K)
        with torch.no_grad():  # in float64, as sinkhorn picks it at these costs (max|C| > 1e-5 * eps / 1.2e-7)
            log_plan, g = self.solve(cost.detach().double(), self.a, self.w.double(), self.g, self.eps, self.iters,
                                      self.trials)
            self.g.copy_(g - (self.w * g).sum())  # the gauge <w, g> = 0, as sinkhorn returns it
            log_plan = log_plan.float()
            plan = log_plan.exp()
            torch.maximum(self.col_err, (plan.sum(0) - self.w).abs().sum(), out=self.col_err)
        loss = recon + self.lam * _objective(plan, log_plan, cost, self.eps)
        loss.backward()
        if self.adam_in_graph:
            self.opt.step()
        self.loss.copy_(loss.detach())

    def update(self, grads: list[torch.Tensor] | None = None) -> None:
        """Adam's step outside the graph (``adam_in_graph=False``), eager, as Lightning's loop takes it after a
        training step: the form of a graphed step that keeps Lightning's automatic optimisation (the graph holds the
        forward, the solve and the backward). ``grads``, a capture's gradient buffers, are put back on the
        parameters first: Lightning's ``zero_grad(set_to_none=True)`` drops them before every step."""
        if grads is not None:
            for p, grad in zip((p for group in self.opt.param_groups for p in group["params"]), grads):
                p.grad = grad
        self.opt.step()


def state(step: SyncFreeStep) -> list[torch.Tensor]:
    """Every tensor a step writes (in place), for snapshots."""
    tensors = [*step.model.parameters(), step.centers, step.g]
    for s in step.opt.state.values():
        tensors += [v for v in s.values() if torch.is_tensor(v)]
    return tensors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--iters", type=int, default=3, help="Sinkhorn iterations a step, before the Newton trials")
    parser.add_argument("--trials", type=int, default=30, help="Newton trials a step")
    parser.add_argument("--solver", choices=["damped", "batched"], default="damped",
                        help="damped: fixed_solve; batched: batched_solve (5 dampings x 5 lengths a trial)")
    parser.add_argument("--continuation", type=float, nargs="+", default=[1.0],
                        help="batched: the epsilon factors its trials run at in turn, ending at 1 (e.g. 16 4 1)")
    parser.add_argument("--adam-outside", action="store_true",
                        help="Adam's step eager after each replay, not in the graph (SyncFreeStep.update)")
    parser.add_argument("--steps", type=int, default=200, help="steps a timing")
    parser.add_argument("--check", type=int, default=20, help="steps of the graph-against-eager comparison")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    dev, m, lam, eps = args.device, 300, 1 / 300, 1e-2
    cuda = dev.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(0)
    x, y = load("mnist", args.data_dir)
    x = x.to(dev)
    model = MLPAutoencoder().to(dev)

    def embed() -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([model.encoder(xb) for xb in x.split(10_000)])

    km = KMeans(10, n_init=3, random_state=0).fit(embed()[:20_000].double().cpu().numpy())
    centers = torch.nn.Parameter(torch.as_tensor(km.cluster_centers_, dtype=torch.float32, device=dev))
    opt = torch.optim.Adam([*model.parameters(), centers], lr=1e-3, fused=True, **({"capturable": True} if cuda else {}))
    w = torch.full((10,), 0.1, device=dev)
    solve = fixed_solve if args.solver == "damped" else functools.partial(
        batched_solve, continuation=tuple(args.continuation))
    step = SyncFreeStep(model, centers, opt, x, w, m, lam, eps, args.iters, args.trials, solve,
                        adam_in_graph=not args.adam_outside)
    steps_per_epoch = len(x) // m

    def indices(n_steps: int) -> list[torch.Tensor]:
        return list(torch.randperm(len(x), device=dev)[: n_steps * m].split(m))

    def eager(batches: list[torch.Tensor]) -> None:
        for idx in batches:
            step.idx.copy_(idx)
            opt.zero_grad(set_to_none=True)
            step()
            if args.adam_outside:
                step.update()

    print(f"device {torch.cuda.get_device_name(0) if cuda else 'cpu'}, torch {torch.__version__}, "
          f"{args.iters} Sinkhorn iterations and {args.trials} {args.solver} Newton trials a sync-free step "
          f"(continuation {args.continuation if args.solver == 'batched' else 'none'}; "
          f"Adam {'eager after each replay' if args.adam_outside else 'in the graph'}), "
          f"{args.steps} steps a timing")
    with torch.no_grad():  # the solve against sinkhorn's on one batch, from a cold start
        cost = squared_distances(model.encoder(x[:m]), centers).double()
        log_plan, _ = solve(cost, step.a, w.double(), torch.zeros_like(step.g), eps, args.iters, args.trials)
        ref = sinkhorn(cost, None, w.double(), epsilon=eps, tol=1e-7, max_iter=10_000).plan
        print(f"one batch, cold start: largest plan difference to sinkhorn's (tol 1e-7) "
              f"{(log_plan.exp() - ref).abs().max().item():.2e} (entries of 1/{m} at most)")
    eager(indices(5))  # Adam's state exists before any snapshot or capture
    graph, static_grads = None, None
    if cuda:
        torch.backends.cuda.preferred_linalg_library("cusolver")  # MAGMA's Cholesky may sync, cuSOLVER's is captured
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            eager(indices(3))
        torch.cuda.current_stream().wait_stream(side)
        opt.zero_grad(set_to_none=True)  # backward inside the capture allocates the grads in the graph's pool
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            static_grads = [p.grad for group in opt.param_groups for p in group["params"]]  # the graph writes these
        except RuntimeError as err:  # report where, and keep the eager figures
            where = traceback.extract_tb(err.__traceback__)[-1]
            print(f"capture failed at {where.filename.rsplit('/', 1)[-1]}:{where.lineno} ({where.line}): {err}")
            graph = None

    def replay(batches: list[torch.Tensor]) -> None:
        for idx in batches:
            step.idx.copy_(idx)
            graph.replay()
            if args.adam_outside:
                step.update(static_grads)

    def timed(run, batches: list[torch.Tensor]) -> float:
        sync()
        t = time.perf_counter()
        run(batches)
        sync()
        return 1e3 * (time.perf_counter() - t) / len(batches)

    g_solved = None

    def solved(batches: list[torch.Tensor]) -> None:
        nonlocal g_solved
        g_solved, _ = train_steps(model, centers, opt, x, batches, w, lam, g_solved)

    solved(indices(10))
    rows = [("bare loop's step, Sinkhorn solved to 1e-5 (as fit)", solved), ("sync-free step, eager", eager)]
    if graph is not None:
        rows.append(("sync-free step, one CUDA graph replay", replay))
    times: dict[str, list[float]] = {name: [] for name, _ in rows}
    col_err = {name: 0.0 for name, _ in rows[1:]}  # the sync-free steps' largest column L1 error, eager and replayed
    for _ in range(3):  # rounds, alternating the kinds of step; the median is reported
        for name, run in rows:
            step.col_err.zero_()
            times[name].append(timed(run, indices(args.steps)))
            if name in col_err:
                col_err[name] = max(col_err[name], step.col_err.item())
    for name, ms in times.items():
        print(f"{name}: {sorted(ms)[1]:.2f} ms a step (rounds {', '.join(f'{t:.2f}' for t in ms)})")
    print("largest column L1 error of these steps' plans: "
          + ", ".join(f"{name.split(', ')[1]} {err:.2e}" for name, err in col_err.items()))

    if graph is not None and args.check:
        batches = indices(args.check)
        start = [t.clone() for t in state(step)]
        eager(batches)
        after_eager = [t.clone() for t in state(step)]
        with torch.no_grad():  # parameters are leaves that require grad
            for t, s in zip(state(step), start):
                t.copy_(s)
        replay(batches)
        diff = max((a - b).abs().max().item() for a, b in zip(state(step), after_eager))
        print(f"{args.check} replayed steps against as many eager steps from the same state: "
              f"largest difference of any parameter or state {diff:.3g}")

    for epoch in range(args.epochs):
        step.col_err.zero_()
        sync()
        t = time.perf_counter()
        (replay if graph is not None else eager)(indices(steps_per_epoch))
        sync()
        seconds = time.perf_counter() - t
        pred = squared_distances(embed(), centers.detach()).argmin(1).cpu()
        print(f"epoch {epoch}: {seconds:.2f} s ({1e3 * seconds / steps_per_epoch:.2f} ms a step), loss "
              f"{step.loss.item():.3f}, largest column error {step.col_err.item():.1e}, accuracy "
              f"{accuracy(pred, y, 10):.3f}, 200 epochs of these steps "
              f"{200 * seconds / 60:.1f} min")


if __name__ == "__main__":
    main()
