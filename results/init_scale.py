"""The untrained encoder's embedding under PyTorch's and TensorFlow's (Glorot) layer initialisation: per-dimension
std of f(x), the mean squared distance to the nearest of 10 k-means centers (n_init 10, as the centers start),
epsilon = 1e-2 relative to it, and that k-means partition's accuracy, over all 70k MNIST images. Usage, from the
repository root:

    python results/init_scale.py --data_dir ../shared/data > results/init_scale.md
"""

from __future__ import annotations

import argparse

import torch
from sklearn.cluster import KMeans

from lit_otclust.data import MNISTDataModule
from lit_otclust.metrics import hungarian_accuracy
from lit_otclust.models import MLPAutoencoder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default="../shared/data")
    p.add_argument("--epsilon", type=float, default=1e-2)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args()
    torch.set_num_threads(1)
    dm = MNISTDataModule(data_dir=args.data_dir, download=False, fit_split="all")
    dm.setup("fit")
    x, y = dm.fit_set.x, dm.fit_set.y
    print(f"Output of `python results/init_scale.py --data_dir {args.data_dir}`\n")
    print("| weight_init | seed | z std per dim | mean squared distance to nearest k-means center | epsilon / that | k-means accuracy |")
    print("|---|---|---|---|---|---|")
    for init in ("torch", "glorot"):
        for seed in args.seeds:
            torch.manual_seed(seed)
            with torch.no_grad():
                z = MLPAutoencoder(weight_init=init).encoder(x)
            km = KMeans(10, n_init=10, random_state=seed).fit(z.numpy())
            d = km.inertia_ / len(z)
            acc = hungarian_accuracy(torch.as_tensor(km.labels_), y, num_clusters=10, num_classes=10)["acc"]
            print(f"| {init} | {seed} | {z.std(0).mean():.3f} | {d:.4f} | {args.epsilon / d:.2f} | {acc:.3f} |", flush=True)


if __name__ == "__main__":
    main()
