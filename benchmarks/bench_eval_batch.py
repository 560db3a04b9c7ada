"""Seconds of one evaluation pass (``Trainer.validate``) against the evaluation batch size.

    python -m benchmarks.bench_eval_batch --data-dir ../shared/data --dataset mnist --sizes 10000 2000 1000 500
    python -m benchmarks.bench_eval_batch --data-dir ../shared/data --dataset cifar10 --sizes 10000 2000 500 250

One freshly initialised model (the encoder costs the same whatever its weights), the configs' ``fit_split: all``
(MNIST 70k images, CIFAR-10 60k; the held-out test split is the fitted set's tail, scored on the same pass), W&B
and checkpoints off. Each size first runs once unmeasured (its first pass pays one-off allocations), then the sizes
run ``--rounds`` times in an order rotated each round, and the median of each is printed. The data modules' default
``eval_batch_size`` comes from these figures.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings

import lightning as L
import torch

from benchmarks.harness import alternate, median
from lit_otclust.data import CIFAR10DataModule, MNISTDataModule
from lit_otclust.models import ConvAutoencoder, MLPAutoencoder
from lit_otclust.system import DeepClustering


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--dataset", choices=("mnist", "cifar10"), default="mnist")
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 2_000, 1_000, 500])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    module, autoencoder = ((MNISTDataModule, MLPAutoencoder) if args.dataset == "mnist"
                           else (CIFAR10DataModule, ConvAutoencoder))
    model = DeepClustering(autoencoder(), num_clusters=10)
    data = {b: module(data_dir=args.data_dir, download=False, eval_batch_size=b) for b in args.sizes}
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        accelerator="cpu", devices=1)
    for b in args.sizes:
        trainer.validate(model, datamodule=data[b], verbose=False)
    def validate(b: int) -> float:
        start = time.perf_counter()
        trainer.validate(model, datamodule=data[b], verbose=False)
        return time.perf_counter() - start

    times = alternate({b: (lambda b=b: validate(b)) for b in args.sizes}, args.rounds, log=False)
    n = len(data[args.sizes[0]].fit_set)
    print(f"{args.dataset}: evaluation of {n} images, {args.threads} thread(s), median of {args.rounds}")
    for b in args.sizes:
        print(f"  eval_batch_size {b:6d}: {median(times[b]):6.2f} s  ({', '.join(f'{t:.2f}' for t in times[b])})")


if __name__ == "__main__":
    main()
