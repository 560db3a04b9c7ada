"""Scale of the learned embedding: per-dimension std of f(x) and, for runs with centers, the mean
squared distance to the nearest center (and epsilon = 1e-2 relative to it), over all 70k MNIST
images. Usage, from the repository root:

    python results/embedding_scale.py --data_dir ../shared/data CKPT [CKPT ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from lit_otclust.data import MNISTDataModule
from study_kmeans_inits import embeddings, encoder_from_checkpoint  # beside this script


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
        encoder, state = encoder_from_checkpoint(ckpt)
        z = torch.as_tensor(embeddings(encoder, dm.fit_set.x)).float()
        centers = state["state_dict"]["centers"]
        if state["hyper_parameters"]["clustering"] != "none":  # AE + k-means never trains its centers
            d = torch.cdist(z, centers).pow(2).min(1).values.mean().item()
            dist, rel = f"{d:.3f}", f"{args.epsilon / d:.4f}"
        else:
            dist = rel = "—"
        print(f"| {Path(ckpt).parents[1].name} | {state['epoch']} | {z.std(0).mean():.3f} | {dist} | {rel} |", flush=True)


if __name__ == "__main__":
    main()
