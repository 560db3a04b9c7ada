"""Time to build the in-memory tensors and to iterate one epoch of batches, with no model.

    python benchmarks/bench_data.py --data-dir ../shared/data

For each data set: the seconds ``prepare_data`` takes when the files are there, against building torchvision's
datasets with ``download=True`` (what it did before); then (fit_split "all" by default) the seconds ``setup`` takes to decode the files
into float tensors, then the seconds per epoch of shuffled training batches (batch_size 300,
drop_last) and of one pass over the two validation loaders. The goal is under 1 s per training
epoch on a 2-core CPU. ``--pil-batches N`` also times N batches through torchvision's per-sample
PIL + ToTensor path, the usual alternative, for scale.
"""

from __future__ import annotations

import argparse
import time

import torch
import torchvision
from torch.utils.data import DataLoader

from lit_otclust.data import CIFAR10DataModule, MNISTDataModule


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def drain(loader) -> int:
    return sum(len(batch[0]) for batch in loader)


def best_of(repeats: int, fn) -> float:
    return min(seconds(fn) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--fit-split", default="all", choices=["train", "test", "all"])
    parser.add_argument("--batch-size", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3, help="epochs timed; the best is printed")
    parser.add_argument("--pil-batches", type=int, default=0, help="also time this many batches via PIL + ToTensor")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, fit_split={args.fit_split}, batch_size={args.batch_size}")

    for module_class, reference_class in ((MNISTDataModule, torchvision.datasets.MNIST), (CIFAR10DataModule, torchvision.datasets.CIFAR10)):
        # prepare_data with the files there (download=True, the configs' default), against what it did before it
        # checked them itself: build torchvision's datasets with download=True, which reads every image.
        fetch = module_class(args.data_dir, download=True)
        prepare_s = best_of(args.repeats, fetch.prepare_data)
        old_s = best_of(args.repeats, lambda: [fetch._torchvision_dataset(t, download=True) for t in (True, False)])
        print(f"{module_class.name:9s} prepare_data, files present: {prepare_s:6.3f} s (torchvision datasets with "
              f"download=True: {old_s:6.3f} s)")
        module = module_class(args.data_dir, download=False, fit_split=args.fit_split, batch_size=args.batch_size)
        setup_s = seconds(module.setup)
        train_s = best_of(args.repeats, lambda: drain(module.train_dataloader()))
        val_s = best_of(args.repeats, lambda: [drain(loader) for loader in module.val_dataloader()])
        num_batches = len(module.train_dataloader())
        megabytes = module.fit_set.x.element_size() * module.fit_set.x.nelement() / 2**20
        print(
            f"{module.name:9s} setup {setup_s:6.2f} s ({len(module.fit_set)} fitted samples, {megabytes:.0f} MiB float32) | "
            f"train epoch {train_s:6.3f} s ({num_batches} batches) | val pass {val_s:6.3f} s"
        )
        if args.pil_batches:
            dataset = reference_class(args.data_dir, train=True, download=False, transform=torchvision.transforms.ToTensor())
            loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
            batches = iter(loader)
            pil_s = seconds(lambda: [next(batches) for _ in range(args.pil_batches)])
            print(f"{'':9s} PIL + ToTensor: {pil_s / args.pil_batches * num_batches:6.2f} s per epoch (from {args.pil_batches} batches)")


if __name__ == "__main__":
    main()
