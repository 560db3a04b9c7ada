"""The work of ``python -m lit_otclust fit --config configs/{mnist,cifar10}_ot.yaml`` as a bare PyTorch loop.

    python -m benchmarks.bare_loop --dataset mnist --epochs 3 --data-dir ../shared/data [--solver fixed --iters 10] \
        [--device cuda]

The reference that ``benchmarks/bench_fit.py`` times the framework against: the same autoencoder
(``lit_otclust.models``), the same k-means init of the centers (sklearn, 10 restarts, on the
untrained embeddings of all fitted images), batches of 300 in a seeded random order (gathered on ``--device``, where
the data set lies whole, as the fit's ``data.on_device`` does), Adam at
1e-3, the same clustering loss (``lit_otclust.losses.ot_clustering_loss`` with the fit's ``--solver``: ``solve`` to
tolerance 1e-5 or ``fixed``, ``--iters`` iterations; both warm-started from the previous batch's g), and after each
epoch the Hungarian accuracy of both assignment rules on all fitted images and on the 10k test split. No Lightning,
no logging, no checkpoints. Prints one JSON line: seconds of training, of evaluation, per step, the last accuracies,
and the seconds from its start at which its phases ended (imports, data, k-means, end).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable

import numpy as np
import torch
import torchvision
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans

from lit_otclust.losses import ot_clustering_loss
from lit_otclust.models import ConvAutoencoder, MLPAutoencoder
from lit_otclust.sinkhorn import squared_distances

_T0 = time.time()


def stamp() -> float:
    return time.time() - _T0


IMPORTED = stamp()


def load(dataset: str, data_dir: str) -> tuple[torch.Tensor, torch.Tensor]:
    """All train + test images as float32 in [0, 1] (the configs' ``fit_split: all``) and labels."""
    if dataset == "mnist":
        parts = [torchvision.datasets.MNIST(data_dir, train=t, download=False) for t in (True, False)]
        x = torch.cat([p.data.reshape(len(p.data), -1) for p in parts])  # (70000, 784) uint8
        y = torch.cat([p.targets for p in parts])
    else:
        parts = [torchvision.datasets.CIFAR10(data_dir, train=t, download=False) for t in (True, False)]
        x = torch.cat([torch.from_numpy(p.data).permute(0, 3, 1, 2) for p in parts]).contiguous()  # (60000, 3, 32, 32)
        y = torch.cat([torch.as_tensor(p.targets) for p in parts])
    return x.float().div_(255.0), y.long()


def accuracy(pred: torch.Tensor, y: torch.Tensor, k: int) -> float:
    table = np.zeros((k, k), dtype=np.int64)
    np.add.at(table, (pred.cpu().numpy(), y.cpu().numpy()), 1)
    rows, cols = linear_sum_assignment(-table)
    return table[rows, cols].sum() / len(y)


def train_steps(model: torch.nn.Module, centers: torch.Tensor, opt: torch.optim.Optimizer, x: torch.Tensor,
                batches: Iterable[torch.Tensor], w: torch.Tensor, lam: float, g: torch.Tensor | None,
                epsilon: float = 1e-2, tol: float = 1e-5, max_iter: int = 1000,
                solver: str = "solve") -> tuple[torch.Tensor | None, list[int]]:
    """One pass of training steps over ``batches`` (index tensors into ``x``): reconstruction + lam * OT loss,
    Adam. Returns the last Sinkhorn potential g (the next batch's warm start) and each step's Sinkhorn iterations."""
    iters = []
    for idx in batches:
        xb = x[idx]
        z, x_hat = model(xb)
        recon = (x_hat - xb).pow(2).flatten(1).sum(1).mean()
        clust, res = ot_clustering_loss(z, centers, w, epsilon=epsilon, tol=tol, iters=max_iter, max_iter=max_iter, g_init=g,
                                        solver=solver)
        g = res.g
        loss = recon + lam * clust
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        iters.append(res.n_iter)
    return g, iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=["mnist", "cifar10"], default="mnist")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--adam", choices=["fused", "default"], default="fused",
                        help="fused: the kernel DeepClustering uses (the same work); default: torch's per-tensor loop")
    parser.add_argument("--solver", choices=["solve", "fixed"], default="solve", help="the fit's model.loss.init_args.solver")
    parser.add_argument("--iters", type=int, default=10, help="the fit's model.loss.init_args.iters (--solver fixed)")
    parser.add_argument("--device", default="cpu", help="where the data, the model and the steps live (cuda: "
                        "the fit's --trainer.accelerator gpu --data.init_args.on_device true)")
    parser.add_argument("--clustering-weight", type=float, default=None,
                        help="lambda; default the config's (1/300 for MNIST, 1 for CIFAR-10)")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    stamps = {"imports": IMPORTED}
    device = torch.device(args.device)
    x, y = (t.to(device) for t in load(args.dataset, args.data_dir))
    stamps["data"] = stamp()
    n, k, batch = len(y), 10, 300
    heldout = slice(n - 10_000, n)  # the test split is the tail of "all"
    lam = args.clustering_weight
    if lam is None:
        lam = 1 / 300 if args.dataset == "mnist" else 1.0
    model = (MLPAutoencoder() if args.dataset == "mnist" else ConvAutoencoder()).to(device)
    w = torch.full((k,), 1.0 / k, device=device)

    # The data modules' default eval_batch_size (the fastest measured, benchmarks/bench_data.py --eval-sizes), stated here
    # because lit_otclust.data imports Lightning.
    chunk = 2_000 if args.dataset == "mnist" else 500

    def embed() -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([model.encoder(xb) for xb in x.split(chunk)])  # (n, p)

    km = KMeans(k, n_init=10, random_state=args.seed).fit(embed().double().cpu().numpy())
    centers = torch.nn.Parameter(torch.as_tensor(km.cluster_centers_, dtype=torch.float32, device=device))
    opt = torch.optim.Adam([*model.parameters(), centers], lr=1e-3, fused=args.adam == "fused")
    stamps["kmeans"] = stamp()
    g, train_s, eval_s, steps = None, 0.0, 0.0, 0
    generator = torch.Generator().manual_seed(args.seed)
    for _ in range(args.epochs):
        start = time.perf_counter()
        order = torch.randperm(n, generator=generator).to(device)
        g, iters = train_steps(model, centers, opt, x, order[: n - n % batch].split(batch), w, lam, g,
                               max_iter=args.iters if args.solver == "fixed" else 1000, solver=args.solver)
        steps += len(iters)
        if device.type == "cuda":
            torch.cuda.synchronize()  # the epoch's kernels done, as the fit's epoch-end evaluation waits for them
        train_s += time.perf_counter() - start
        start = time.perf_counter()
        z = embed()
        cost = squared_distances(z, centers.detach())
        acc = {rule: accuracy(c.argmin(1), y, k) for rule, c in (("distance", cost), ("potential", cost - g))}
        acc_heldout = accuracy(cost[heldout].argmin(1), y[heldout], k)
        eval_s += time.perf_counter() - start
    stamps["end"] = stamp()
    print(json.dumps({"train_s": train_s, "eval_s": eval_s, "steps": steps, "ms_per_step": 1e3 * train_s / steps,
                      "acc": acc["distance"], "acc_potential": acc["potential"], "heldout_acc": acc_heldout,
                      "stamps": stamps}))


if __name__ == "__main__":
    main()
