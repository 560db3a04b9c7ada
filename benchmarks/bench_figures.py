"""Time of one drawing of the cluster pictures right after an evaluation, reusing its embeddings or not.

    python -m benchmarks.bench_figures --data-dir ../shared/data --dataset cifar10 --repeats 3

``ClusterFigures.draw`` embeds every fitted sample (and the held-out ones for their cluster sizes) unless the
evaluation just before it left them in ``eval_embeddings`` with no training step since, which is the case at
every drawing of a ``fit``. This runs one evaluation of a freshly initialised model (the embedding costs the same
whatever the weights), then draws alternately with that evaluation's embeddings and without them (emptied),
``--repeats`` times each, W&B off, 1 thread by default, and prints the seconds of each drawing.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import lightning as L
import torch

from lit_otclust.data import CIFAR10DataModule, MNISTDataModule
from lit_otclust.figures import ClusterFigures
from lit_otclust.models import ConvAutoencoder, MLPAutoencoder
from lit_otclust.system import DeepClustering


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--dataset", choices=("mnist", "cifar10"), default="cifar10")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.dataset == "cifar10":
        dm, ae = CIFAR10DataModule(data_dir=args.data_dir, download=False, fit_split="all"), ConvAutoencoder()
    else:
        dm, ae = MNISTDataModule(data_dir=args.data_dir, download=False, fit_split="all"), MLPAutoencoder()
    model = DeepClustering(ae, num_clusters=10)
    drawer = ClusterFigures(every_n_epochs=0)
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(default_root_dir=root, logger=False, callbacks=[drawer], enable_progress_bar=False,
                            enable_model_summary=False, accelerator="cpu", devices=1)
        start = time.perf_counter()
        trainer.validate(model, datamodule=dm, verbose=False)
        print(f"{args.dataset}: evaluation of {len(dm.fit_set)} + {len(dm.heldout_set)} samples "
              f"{time.perf_counter() - start:.1f} s, {args.threads} thread(s)")
        cached = model.eval_embeddings
        times: dict[str, list[float]] = {"reused": [], "embedded again": []}
        for _ in range(args.repeats):
            for label, cache in (("reused", cached), ("embedded again", {})):
                model.eval_embeddings = cache
                start = time.perf_counter()
                drawer.draw(trainer, model, "bench", 0)
                times[label].append(time.perf_counter() - start)
    for label, ts in times.items():
        print(f"  drawing, embeddings {label:>14}: median {statistics.median(ts):5.2f} s  "
              f"({', '.join(f'{t:.2f}' for t in ts)})")


if __name__ == "__main__":
    main()
