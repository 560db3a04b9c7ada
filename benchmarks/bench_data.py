"""The data pipeline: decoding the files into tensors, an epoch of batches and an evaluation pass with no model; and
one evaluation pass of a model (``Trainer.validate``) against ``eval_batch_size``.

    python -m benchmarks.bench_data --data-dir ../shared/data [--datasets mnist cifar10] [--rounds 3] [--pil-batches 20]
    python -m benchmarks.bench_data --data-dir ../shared/data --datasets cifar10 --eval-sizes 10000 2000 500 250

For each data set (``fit_split`` "all", the configs'): the seconds of ``prepare_data`` with the files present and of
``setup`` (decoding into float32 tensors), then, alternating round by round, one epoch of shuffled training batches
(batch_size 300, drop_last) and one pass over the two evaluation loaders; medians. ``--pil-batches N`` also times N
batches through torchvision's per-sample PIL + ToTensor path, the usual alternative, scaled to an epoch.

``--eval-sizes``: one freshly initialised model per data set (MNIST's MLP, CIFAR-10's conv autoencoder; the encoder
costs the same whatever its weights), W&B and checkpoints off; each size first runs once unmeasured (one-off
allocations), then the sizes alternate over ``--rounds``. The data modules' default ``eval_batch_size`` comes from these.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from functools import partial

import lightning as L
import torch
import torchvision
from torch.utils.data import DataLoader

from benchmarks.harness import alternate, median
from lit_otclust.data import CIFAR10DataModule, MNISTDataModule
from lit_otclust.models import ConvAutoencoder, MLPAutoencoder
from lit_otclust.system import DeepClustering

MODULES = {"mnist": (MNISTDataModule, torchvision.datasets.MNIST),
           "cifar10": (CIFAR10DataModule, torchvision.datasets.CIFAR10)}


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def drain(make_loader) -> int:
    return sum(len(batch[0]) for batch in make_loader())


def drain_all(make_loaders) -> int:
    return sum(len(batch[0]) for loader in make_loaders() for batch in loader)


def pil_epoch(dataset, batch_size: int, batches: int, epoch_batches: int) -> float:
    """Seconds of ``batches`` batches through the per-sample PIL path, scaled to ``epoch_batches``."""
    loader = iter(DataLoader(dataset, batch_size=batch_size, shuffle=True))
    return epoch_batches / batches * seconds(lambda: [next(loader) for _ in range(batches)])


def eval_passes(name: str, data_dir: str, sizes: list[int], rounds: int) -> None:
    """Print the median seconds of one ``Trainer.validate`` pass at each evaluation batch size in ``sizes``."""
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    torch.manual_seed(0)
    module_class = MODULES[name][0]
    model = DeepClustering(MLPAutoencoder() if name == "mnist" else ConvAutoencoder(), num_clusters=10)
    data = {b: module_class(data_dir=data_dir, download=False, eval_batch_size=b) for b in sizes}
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        accelerator="cpu", devices=1)
    for b in sizes:
        trainer.validate(model, datamodule=data[b], verbose=False)
    times = alternate({b: partial(seconds, partial(trainer.validate, model, datamodule=data[b], verbose=False))
                       for b in sizes}, rounds, log=False)
    print(f"{name}: evaluation of {len(data[sizes[0]].fit_set)} images, median of {rounds}")
    for b in sizes:
        print(f"  eval_batch_size {b:6d}: {median(times[b]):6.2f} s  ({', '.join(f'{t:.2f}' for t in times[b])})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--datasets", nargs="+", choices=list(MODULES), default=list(MODULES))
    parser.add_argument("--batch-size", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pil-batches", type=int, default=0, help="also time this many batches via PIL + ToTensor")
    parser.add_argument("--eval-sizes", type=int, nargs="+", default=[],
                        help="instead: one evaluation pass of a model at each of these eval_batch_size values")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch_size {args.batch_size}, "
          f"median of {args.rounds}")
    for name in args.datasets:
        if args.eval_sizes:
            eval_passes(name, args.data_dir, args.eval_sizes, args.rounds)
            continue
        module_class, reference_class = MODULES[name]
        prepare_s = seconds(module_class(args.data_dir, download=True).prepare_data)
        module = module_class(args.data_dir, download=False, fit_split="all", batch_size=args.batch_size)
        setup_s = seconds(module.setup)
        runs = {"train epoch": partial(seconds, partial(drain, module.train_dataloader)),
                "evaluation pass": partial(seconds, partial(drain_all, module.val_dataloader))}
        if args.pil_batches:
            dataset = reference_class(args.data_dir, train=True, download=False,
                                      transform=torchvision.transforms.ToTensor())
            runs["PIL + ToTensor epoch"] = partial(pil_epoch, dataset, args.batch_size, args.pil_batches,
                                                   len(module.train_dataloader()))
        times = alternate(runs, args.rounds, log=False)
        megabytes = module.fit_set.x.element_size() * module.fit_set.x.nelement() / 2**20
        print(f"{name}: prepare_data {prepare_s:.3f} s, setup {setup_s:.2f} s ({len(module.fit_set)} fitted images, "
              f"{megabytes:.0f} MiB float32); " + ", ".join(f"{k} {median(v):.3f} s" for k, v in times.items()))


if __name__ == "__main__":
    main()
