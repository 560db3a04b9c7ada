"""Where a training step's time goes on an accelerator: launches and host syncs, not arithmetic.

    python -m benchmarks.bench_gpu_step --data-dir ../shared/data [--device cuda] [--steps 100]

The bare loop's steps (``benchmarks.bare_loop.train_steps``: the MNIST autoencoder, k-means centers, fused Adam,
``ot_clustering_loss`` warm-started) on full MNIST held on the device, timed with the device synchronised; then
the autoencoder step alone, the OT loss and its backward alone (warm and cold ``g``), and ``torch.profiler`` over
20 more steps: the top operators by host time, and per step the host syncs (``aten::item``,
``cudaStreamSynchronize``), kernel launches and copies. ``benchmarks/gpu_check.sh`` runs it. On a CPU it runs
too (the CUDA rows read 0), which checks the script, not the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from sklearn.cluster import KMeans
from torch.profiler import ProfilerActivity, profile

from benchmarks.bare_loop import load, train_steps
from lit_otclust.losses import ot_clustering_loss
from lit_otclust.models import MLPAutoencoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    dev, steps = args.device, args.steps
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    torch.manual_seed(0)
    x, _ = load("mnist", args.data_dir)
    x = x.to(dev)
    model = MLPAutoencoder().to(dev)
    with torch.no_grad():
        z = torch.cat([model.encoder(xb) for xb in x.split(10_000)])
    km = KMeans(10, n_init=3, random_state=0).fit(z[:20_000].double().cpu().numpy())
    centers = torch.nn.Parameter(torch.as_tensor(km.cluster_centers_, dtype=torch.float32, device=dev))
    opt = torch.optim.Adam([*model.parameters(), centers], lr=1e-3, fused=True)
    w = torch.full((10,), 0.1, device=dev)

    def batches() -> list[torch.Tensor]:
        return list(torch.randperm(len(x), device=dev)[: steps * 300].split(300))

    g, _ = train_steps(model, centers, opt, x, batches()[:20], w, 1 / 300, None)  # warm-up
    sync()
    t = time.perf_counter()
    g, iters = train_steps(model, centers, opt, x, batches(), w, 1 / 300, g)
    sync()
    print(f"bare step: {1e3 * (time.perf_counter() - t) / steps:.2f} ms, "
          f"Sinkhorn iterations mean {statistics.mean(iters):.1f} max {max(iters)}")
    sync()
    t = time.perf_counter()
    for idx in batches():
        xb = x[idx]
        _, x_hat = model(xb)
        loss = (x_hat - xb).pow(2).flatten(1).sum(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync()
    print(f"AE-only step: {1e3 * (time.perf_counter() - t) / steps:.2f} ms")
    zb = model.encoder(x[:300]).detach().requires_grad_()
    for name, warm in (("warm g, fixed z", g), ("cold g", None)):
        sync()
        t, its = time.perf_counter(), []
        for _ in range(steps):
            loss, res = ot_clustering_loss(zb, centers, w, epsilon=0.01, tol=1e-5, g_init=warm)
            loss.backward()
            its.append(res.n_iter)
        sync()
        print(f"OT loss fwd+bwd alone ({name}): {1e3 * (time.perf_counter() - t) / steps:.2f} ms, "
              f"iters {statistics.mean(its):.1f}")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.startswith("cuda") else [])
    profiled = batches()[:20]
    with profile(activities=acts) as prof:
        g, _ = train_steps(model, centers, opt, x, profiled, w, 1 / 300, g)
        sync()
    table = prof.key_averages()
    print(table.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=40))
    counts = {e.key: e.count for e in table}
    for name in ("aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaLaunchKernel",
                 "cudaMemcpyAsync"):
        print(name, "calls per step:", counts.get(name, 0) / len(profiled))


if __name__ == "__main__":
    main()
