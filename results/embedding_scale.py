"""Scale of the learned embedding: per-dimension std of f(x) and, for runs with centers, the mean
squared distance to the nearest center (and epsilon = 1e-2 relative to it), over all 70k MNIST
images. Usage, from the repository root:

    PYTHONPATH=. python results/embedding_scale.py --data_dir ../shared/data CKPT [CKPT ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from lit_otclust.data import MNISTDataModule
from lit_otclust.models import MLPAutoencoder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default="../shared/data")
    p.add_argument("--epsilon", type=float, default=1e-2)
    p.add_argument("ckpts", nargs="+")
    args = p.parse_args()
    dm = MNISTDataModule(data_dir=args.data_dir, download=False, fit_split="all")
    dm.setup("fit")
    print("| run | epoch | z std per dim | mean squared distance to nearest center | epsilon / that |")
    print("|---|---|---|---|---|")
    for ckpt in args.ckpts:
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        weights = state["state_dict"]
        ae = MLPAutoencoder((784,))
        ae.load_state_dict({k.removeprefix("autoencoder."): v for k, v in weights.items() if k.startswith("autoencoder.")})
        with torch.no_grad():
            z = torch.cat([ae.encoder(xb) for xb in dm.fit_set.x.split(10_000)])
        centers = weights["centers"]
        if state["hyper_parameters"]["clustering"] != "none":  # AE + k-means never trains its centers
            d = torch.cdist(z, centers).pow(2).min(1).values.mean().item()
            dist, rel = f"{d:.3f}", f"{args.epsilon / d:.4f}"
        else:
            dist = rel = "—"
        print(f"| {Path(ckpt).parents[1].name} | {state['epoch']} | {z.std(0).mean():.3f} | {dist} | {rel} |", flush=True)


if __name__ == "__main__":
    main()
