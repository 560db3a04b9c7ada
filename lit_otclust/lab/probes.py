"""Measurements of embeddings and plans that RESULTS.md cites beside the training records, on full MNIST.

    python -m lit_otclust.lab.probes embedding_scale --data_dir ../shared/data CKPT [CKPT ...]
    python -m lit_otclust.lab.probes init_scale --data_dir ../shared/data
    python -m lit_otclust.lab.probes kmeans_inits --data_dir ../shared/data --out results/study_kmeans [--ckpts CKPT ...]
    python -m lit_otclust.lab.probes plan_noise results/figures_mnist_ot_seed0/predictions.csv.gz
    python -m lit_otclust.lab.probes proportions --data_dir ../shared/data --out results/imbalanced_embedding CKPT [...]

- ``embedding_scale``: how large the learned embedding is against epsilon: per-dimension std of f(x) and the mean
  squared distance to the nearest center, over all 70k images (the clustering term acts only where epsilon is
  small against that distance).
- ``init_scale``: the same for the untrained encoder under PyTorch's and Glorot's initialisation, with the k-means
  centers the joint phase would start from and that partition's accuracy.
- ``kmeans_inits``: how much k-means restarts (``n_init``) move the accuracy on a fixed embedding.
- ``plan_noise``: how much mass a balanced plan must move off the nearest centers from batch sampling alone.
- ``proportions``: what a known w can do on a fixed embedding (its checkpoint's data set, imbalanced ones
  included): k-means; the joint phase's start (the k-means centers, w matched by size, each image to
  ``argmin_k ||z - mu_k||^2 - g_k``); size-constrained k-means; and size-constrained k-means started from the
  class means, each class carrying its own share. Where the last has a higher transport cost than the search's,
  the size-constrained objective prefers another partition to the classes on that embedding.

The checkpoints are read by their weights (``autoencoder.*``, ``centers``), so those of any version of the
system load; the encoder is the MNIST MLP the checkpoint names (:func:`encoder_from_checkpoint`).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
from math import comb
from pathlib import Path

import numpy as np
import torch
from scipy.stats import ttest_rel
from sklearn.cluster import KMeans
from torch import Tensor, nn

from lit_otclust.clustering import constrained_kmeans, constrained_lloyd, match_sizes
from lit_otclust.data import MNISTDataModule
from lit_otclust.metrics import hungarian_accuracy
from lit_otclust.models import MLPAutoencoder, WeightInit, autoencoder_state
from lit_otclust.sinkhorn import squared_distances


def _mnist(data_dir: str) -> tuple[Tensor, Tensor]:
    """All 70k MNIST images (70000, 784) in [0, 1] and their labels, as training reads them."""
    dm = MNISTDataModule(data_dir=data_dir, download=False, fit_split="all")
    dm.setup("fit")
    return dm.fit_set.x, dm.fit_set.y


@torch.no_grad()
def _embed(encoder: nn.Module, x: Tensor) -> Tensor:
    return torch.cat([encoder(xb) for xb in x.split(10_000)]).double()


def encoder_from_checkpoint(ckpt: str) -> tuple[nn.Module, dict]:
    """The MNIST MLP encoder of a checkpoint, and the checkpoint: the :class:`MLPAutoencoder` its hyperparameters
    name (DEC's d-500-500-2000-10 included), else the paper's d-500-250-10 (checkpoints that did not save it)."""
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    spec = state.get("hyper_parameters", {}).get("autoencoder")
    args = {}
    if isinstance(spec, dict):
        if not spec.get("class_path", "").endswith("MLPAutoencoder"):
            raise ValueError(f"the probes read MLP autoencoders; {ckpt} holds {spec.get('class_path')}")
        args = {k: v for k, v in spec.get("init_args", {}).items() if k != "weights"}  # the checkpoint's own below
    ae = MLPAutoencoder(**{"input_shape": (784,), **args})
    ae.load_state_dict(autoencoder_state(state))
    return ae.encoder, state


def nearest_distance(z: Tensor, centers: Tensor) -> float:
    """Mean over the rows of z (N, p) of the squared distance to the nearest of ``centers`` (K, p)."""
    return squared_distances(z, centers.to(z.dtype)).min(1).values.mean().item()


def embedding_scale(ckpts: list[str], data_dir: str = "data", epsilon: float = 1e-2) -> None:
    """Print a Markdown table: per checkpoint, its epoch, the per-dimension std of f(x), the mean squared
    distance to the nearest center and epsilon over it (AE + k-means never trains centers: no distance)."""
    x, _ = _mnist(data_dir)
    print("| run | epoch | z std per dim | mean squared distance to nearest center | epsilon / that |")
    print("|---|---|---|---|---|")
    for ckpt in ckpts:
        encoder, state = encoder_from_checkpoint(ckpt)
        z = _embed(encoder, x)
        dist = rel = "—"
        hparams = state["hyper_parameters"]  # `loss` (None: AE + k-means), or `clustering` before it
        if hparams.get("loss", hparams.get("clustering")) not in (None, "none"):
            d = nearest_distance(z, state["state_dict"]["centers"])
            dist, rel = f"{d:.3f}", f"{epsilon / d:.4f}"
        print(f"| {Path(ckpt).parents[1].name} | {state['epoch']} | {z.std(0).mean():.3f} | {dist} | {rel} |",
              flush=True)


def init_scale(data_dir: str = "data", epsilon: float = 1e-2, seeds: tuple[int, ...] = (0, 1, 2)) -> None:
    """Print a Markdown table: per initialisation and seed, the untrained encoder's per-dimension std of f(x),
    the mean squared distance to the nearest of 10 k-means centers (n_init 10, as the centers start), epsilon over
    it, and that k-means partition's accuracy."""
    torch.set_num_threads(1)
    x, y = _mnist(data_dir)
    print("| weight_init | seed | z std per dim | mean squared distance to nearest k-means center | epsilon / that "
          "| k-means accuracy |")
    print("|---|---|---|---|---|---|")
    inits: tuple[WeightInit, ...] = ("torch", "glorot")
    for init in inits:
        for seed in seeds:
            torch.manual_seed(seed)
            z = _embed(MLPAutoencoder(weight_init=init).encoder, x).float()
            km = KMeans(10, n_init=10, random_state=seed).fit(z.numpy())
            d = km.inertia_ / len(z)
            acc = hungarian_accuracy(torch.as_tensor(km.labels_), y, num_clusters=10, num_classes=10)["acc"]
            print(f"| {init} | {seed} | {z.std(0).mean():.3f} | {d:.4f} | {epsilon / d:.2f} | {acc:.3f} |",
                  flush=True)


def best_of(accs: list[float], inertias: list[float], r: int) -> float:
    """Expected accuracy of k-means with ``n_init = r`` from R single-init runs: it keeps the lowest-inertia of
    r inits, and the best of a random r-subset of R is the i-th lowest (0-based) with probability
    C(R-1-i, r-1) / C(R, r)."""
    order = np.argsort(inertias)
    weights = np.array([comb(len(accs) - 1 - i, r - 1) for i in range(len(accs))], dtype=float)
    return float(np.dot(weights / comb(len(accs), r), np.asarray(accs)[order]))


def _kmeans_runs(name: str, z: np.ndarray, y: Tensor, repeats: int, check_seeds: int) -> list[dict]:
    rows = []
    for n_init, seeds in ((1, repeats), (10, check_seeds)):
        for seed in range(seeds):
            km = KMeans(n_clusters=10, n_init=n_init, random_state=seed, init="k-means++").fit(z)
            scores = hungarian_accuracy(torch.as_tensor(km.labels_), y, 10, 10)
            rows.append({"embedding": name, "n_init": n_init, "seed": seed, "acc": float(scores["acc"]),
                         "nmi": float(scores["nmi"]), "inertia": float(km.inertia_)})
        accs = [r["acc"] for r in rows if r["n_init"] == n_init]
        print(f"{name} n_init={n_init} ({seeds} seeds): acc {np.mean(accs):.3f} ± {np.std(accs, ddof=1):.3f} "
              f"[{min(accs):.3f}, {max(accs):.3f}]", flush=True)
    single = [r for r in rows if r["n_init"] == 1]
    acc, inertia = [r["acc"] for r in single], [r["inertia"] for r in single]
    print(f"{name} best-of-10 estimate: acc {best_of(acc, inertia, 10):.3f}; "
          f"corr(inertia, acc) {np.corrcoef(inertia, acc)[0, 1]:+.2f}", flush=True)
    return rows


def kmeans_inits(data_dir: str = "data", out: str = "results/study_kmeans", ckpts: tuple[str, ...] = (),
                 repeats: int = 20, check_seeds: int = 2, untrained_seeds: tuple[int, ...] = (0,)) -> None:
    """k-means++ with one init for ``repeats`` seeds on each embedding (the untrained encoder's, then each
    checkpoint's): accuracy, NMI and inertia per run into ``out/kmeans_inits.json``; ``check_seeds`` runs of
    n_init = 10 check the :func:`best_of` estimate."""
    torch.set_num_threads(1)
    x, y = _mnist(data_dir)
    rows = []
    for seed in untrained_seeds:
        torch.manual_seed(seed)
        z = _embed(MLPAutoencoder((784,)).encoder, x).numpy()
        rows += _kmeans_runs(f"untrained encoder (seed {seed})", z, y, repeats, check_seeds)
    for ckpt in ckpts:
        encoder, state = encoder_from_checkpoint(ckpt)
        name = f"{Path(ckpt).parents[1].name} (epoch {state['epoch']})"
        rows += _kmeans_runs(name, _embed(encoder, x).numpy(), y, repeats, check_seeds)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "kmeans_inits.json").write_text(json.dumps(rows, indent=1) + "\n")


def forced_move(clusters: np.ndarray, num_clusters: int, batch: int, batches: int, seed: int) -> float:
    r"""Mean over ``batches`` random batches of ``batch`` points (drawn without replacement, as training does) of
    the mass a plan with column sums 1/K must move off the nearest centers: :math:`\frac12 \sum_k |n_k / m - 1/K|`,
    n_k the batch's points whose nearest center is k (``clusters``, (N,) ints in [0, K))."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(batches):
        n = np.bincount(rng.choice(clusters, batch, replace=False), minlength=num_clusters)
        total += 0.5 * np.abs(n / batch - 1.0 / num_clusters).sum()
    return total / batches


def plan_noise(predictions: str, batch: int = 300, batches: int = 2000) -> None:
    """Print the forced move of :func:`forced_move` for a ``predict`` output's nearest-center clusters, and for an
    exactly balanced partition of the same size (the sampling noise of a batch alone)."""
    opener = gzip.open if predictions.endswith(".gz") else open
    with opener(predictions, "rt") as fh:
        clusters = np.array([int(row["cluster"]) for row in csv.DictReader(fh)])
    if batch > len(clusters):
        raise ValueError(f"--batch {batch} is larger than {predictions}'s {len(clusters)} rows")
    K = int(clusters.max()) + 1
    sizes = np.bincount(clusters, minlength=K) / len(clusters)
    balanced = np.repeat(np.arange(K), len(clusters) // K)
    print(f"{len(clusters)} images, K = {K}, nearest-center cluster sizes {np.round(sizes, 3).tolist()}")
    print(f"whole-set imbalance (1/2) sum |size - 1/K| = {0.5 * np.abs(sizes - 1 / K).sum():.3f}")
    print(f"forced move per batch of {batch}, learned partition: {forced_move(clusters, K, batch, batches, 0):.3f}")
    print(f"forced move per batch of {batch}, exactly balanced partition: "
          f"{forced_move(balanced, K, batch, batches, 0):.3f}")
    for m in [m for m in (1000, 3000) if m <= len(clusters)]:
        print(f"forced move per batch of {m}, learned partition: {forced_move(clusters, K, m, batches // 4, 0):.3f}")


def _fitted_set(state: dict, data_dir: str) -> tuple[Tensor, Tensor]:
    """The images (N, 784) and labels a checkpoint was fitted on, rebuilt from its data module's settings."""
    hparams = {k: v for k, v in state["datamodule_hyper_parameters"].items() if not k.startswith("_")}
    if state["datamodule_hyper_parameters"].get("_class_path", "").rsplit(".", 1)[-1] != "MNISTDataModule":
        raise ValueError("the proportions probe reads MNIST checkpoints; this one was fitted on "
                         f"{state['datamodule_hyper_parameters'].get('_class_path')}")
    dm = MNISTDataModule(**{**hparams, "data_dir": data_dir, "download": False})
    dm.setup("fit")
    return dm.fit_set.x, dm.fit_set.y


def _partition(name: str, labels: Tensor, y: Tensor, K: int, cost: float | None) -> dict:
    scores = hungarian_accuracy(labels, y, K, K)
    return {"partition": name, "acc": float(scores["acc"]), "size_error": float(scores["size_error"]),
            "cost": cost}


def proportions(ckpts: list[str], data_dir: str = "data", out: str = "results/imbalanced_embedding",
                n_init: int = 20) -> None:
    """Per checkpoint, four partitions (six with trained centers) of its embedding of the images it was fitted on,
    told w = their class shares: accuracy, size error and transport cost <P, C> into ``out/proportions.json`` and
    ``out/proportions.md`` (:func:`write_proportions`)."""
    torch.set_num_threads(1)
    rows = []
    for ckpt in ckpts:
        encoder, state = encoder_from_checkpoint(ckpt)
        x, y = _fitted_set(state, data_dir)
        z = _embed(encoder, x)  # (N, p) float64
        K = int(y.max()) + 1
        w = torch.bincount(y, minlength=K).double() / len(y)
        run = {"checkpoint": ckpt, "epoch": state["epoch"], "seed": state["datamodule_hyper_parameters"]["seed"]}
        km = KMeans(n_clusters=K, n_init=10, random_state=run["seed"]).fit(z.numpy())
        rows.append({**run, **_partition("k-means", torch.as_tensor(km.labels_), y, K, None)})
        mu = torch.as_tensor(km.cluster_centers_)
        sizes = torch.bincount(torch.as_tensor(km.labels_), minlength=K).double() / len(y)
        start = mu[match_sizes(sizes, w)]  # the joint phase's start: center k carries w_k
        value, _, g = constrained_lloyd(z, w, start, max_iter=0)
        rows.append({**run, **_partition("k-means centers, w by size", (squared_distances(z, start) - g).argmin(1),
                                         y, K, value)})
        hparams = state["hyper_parameters"]  # `loss` (None: AE + k-means), or `clustering` before it
        if hparams.get("loss", hparams.get("clustering")) not in (None, "none"):  # trained centers, k carrying w_k
            trained = state["state_dict"]["centers"].double()
            value, _, g = constrained_lloyd(z, w, trained, max_iter=0)
            rows.append({**run, **_partition("the checkpoint's centers, nearest", squared_distances(z, trained)
                                             .argmin(1), y, K, None)})
            rows.append({**run, **_partition("the checkpoint's centers, w", (squared_distances(z, trained) - g)
                                             .argmin(1), y, K, value)})
        centers, g, labels = constrained_kmeans(z, w, n_init=n_init, seed=run["seed"])
        value, _, _ = constrained_lloyd(z, w, centers.double(), max_iter=0)
        rows.append({**run, **_partition("size-constrained k-means", labels, y, K, value)})
        means = torch.stack([z[y == k].mean(0) for k in range(K)])
        value, centers, g = constrained_lloyd(z, w, means)
        rows.append({**run, **_partition("size-constrained k-means from the class means",
                                         (squared_distances(z, centers) - g).argmin(1), y, K, value)})
        print(*(f"{r['partition']}: acc {r['acc']:.3f} size error {r['size_error']:.3f} cost {r['cost']}"
                for r in rows if r["checkpoint"] == ckpt), sep="\n", flush=True)
    write_proportions(rows, out, n_init)


def write_proportions(rows: list[dict], out: str, n_init: int) -> None:
    """``out/proportions.json`` (the rows) and ``out/proportions.md``: the rows, then each partition over the
    checkpoints against k-means on the same checkpoint (paired t-test)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "proportions.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [(f"`python -m lit_otclust.lab.probes proportions --data_dir DATA --out {out} CKPT ...` on the checkpoints "
              f"below (n_init {n_init}): accuracy and size error against the classes, and the transport cost <P, C> "
              "told w."),
             "", "| checkpoint | seed | epoch | partition | acc | size error | transport cost |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        cost = "" if r["cost"] is None else f"{r['cost']:.4f}"
        lines.append(f"| {Path(r['checkpoint']).parents[1].name} | {r['seed']} | {r['epoch']} | {r['partition']} | "
                     f"{r['acc']:.3f} | {r['size_error']:.3f} | {cost} |")
    lines += ["", "Each partition against k-means on the same checkpoints (paired t-test):", "",
              "| partition | checkpoints | acc mean ± sd | minus k-means, mean ± sd | paired p |",
              "|---|---|---|---|---|"]

    def sd(v: np.ndarray) -> str:
        return f"{v.std(ddof=1):.3f}" if len(v) > 1 else "—"

    accs: dict[str, dict[str, float]] = {}
    for r in rows:
        accs.setdefault(r["partition"], {})[r["checkpoint"]] = r["acc"]
    for name, acc in accs.items():
        a = np.array(list(acc.values()))
        d = a - np.array([accs["k-means"][c] for c in acc])
        p = f"{ttest_rel(a, a - d).pvalue:.3g}" if len(a) > 1 and d.any() else "—"
        lines.append(f"| {name} | {len(a)} | {a.mean():.3f} ± {sd(a)} | {d.mean():+.3f} ± {sd(d)} | {p} |")
    (Path(out) / "proportions.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lit_otclust.lab.probes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def on_mnist(name: str, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text)
        p.add_argument("--data_dir", default="data", help="the folder holding MNIST/raw")
        return p

    p = on_mnist("embedding_scale", "trained checkpoints' embedding scale against epsilon")
    p.add_argument("--epsilon", type=float, default=1e-2)
    p.add_argument("ckpts", nargs="+", metavar="CKPT")
    p = on_mnist("init_scale", "the untrained encoder's embedding scale, PyTorch's and Glorot's initialisation")
    p.add_argument("--epsilon", type=float, default=1e-2)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p = on_mnist("kmeans_inits", "accuracy of k-means over its restarts on fixed embeddings")
    p.add_argument("--out", default="results/study_kmeans")
    p.add_argument("--ckpts", nargs="*", default=[], metavar="CKPT")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--check_seeds", type=int, default=2)
    p.add_argument("--untrained_seeds", type=int, nargs="*", default=[0])
    p = sub.add_parser("plan_noise", help="mass a balanced plan moves off the nearest centers from batch noise")
    p.add_argument("predictions", help="a predict output, predictions.csv or .csv.gz")
    p.add_argument("--batch", type=int, default=300)
    p.add_argument("--batches", type=int, default=2000)
    p = on_mnist("proportions", "what a known w can do on a fixed embedding: four partitions against the classes")
    p.add_argument("--out", default="results/imbalanced_embedding")
    p.add_argument("--n_init", type=int, default=20)
    p.add_argument("ckpts", nargs="+", metavar="CKPT")
    args = vars(parser.parse_args(argv))
    try:
        globals()[args.pop("command")](**args)
    except (ValueError, RuntimeError, FileNotFoundError) as err:  # bad input or missing files: the message only
        parser.error(str(err))


if __name__ == "__main__":
    main()
