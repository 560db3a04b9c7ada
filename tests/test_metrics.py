"""Tests for lit_otclust.metrics against sklearn, brute force, and a 2-process gloo run."""

from __future__ import annotations

import doctest
import itertools

import numpy as np
import pytest
import torch
from _dist import run_in_processes
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from lit_otclust import metrics
from lit_otclust.metrics import HungarianAccuracy, hungarian_accuracy, match_clusters


def _noisy_clustering(n: int, num_clusters: int, num_classes: int, noise: float, seed: int):
    """Cluster ids that follow the labels through a random map, with a fraction ``noise`` random."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(num_classes, (n,), generator=gen)
    class_to_cluster = torch.randint(num_clusters, (num_classes,), generator=gen)
    preds = class_to_cluster[target]
    flip = torch.rand(n, generator=gen) < noise
    preds[flip] = torch.randint(num_clusters, (int(flip.sum()),), generator=gen)
    return preds, target


def _brute_force_accuracy(preds: torch.Tensor, target: torch.Tensor, num_clusters: int, num_classes: int) -> float:
    """Best accuracy over every one-to-one map between clusters and classes (the paper's formula)."""
    best = 0
    p, t = preds.tolist(), target.tolist()
    if num_clusters <= num_classes:
        maps = (dict(zip(range(num_clusters), image)) for image in itertools.permutations(range(num_classes), num_clusters))
    else:
        maps = ({k: c for c, k in enumerate(chosen)} for chosen in itertools.permutations(range(num_clusters), num_classes))
    for sigma in maps:
        best = max(best, sum(sigma.get(k, -1) == y for k, y in zip(p, t)))
    return best / len(p)


@pytest.mark.parametrize(("num_clusters", "num_classes"), [(4, 4), (3, 5), (6, 3), (1, 3), (5, 5)])
@pytest.mark.parametrize("seed", [0, 1])
def test_against_sklearn_and_brute_force(num_clusters: int, num_classes: int, seed: int) -> None:
    preds, target = _noisy_clustering(60, num_clusters, num_classes, noise=0.4, seed=seed)
    out = hungarian_accuracy(preds, target, num_clusters, num_classes)

    assert out["acc"].item() == pytest.approx(_brute_force_accuracy(preds, target, num_clusters, num_classes), abs=1e-6)
    assert out["nmi"].item() == pytest.approx(normalized_mutual_info_score(target, preds), abs=1e-6)
    assert out["ari"].item() == pytest.approx(adjusted_rand_score(target, preds), abs=1e-6)
    # The matching realises the accuracy when predictions are read as class labels.
    as_classes = out["matching"][preds]
    assert (as_classes == target).float().mean().item() == pytest.approx(out["acc"].item(), abs=1e-6)
    assert (out["matching"] >= 0).sum() == min(num_clusters, num_classes)


def test_large_sample_matches_sklearn() -> None:
    # 70k samples: the ARI's pair products exceed int64, the NMI sums many small terms.
    preds, target = _noisy_clustering(70_000, 10, 10, noise=0.3, seed=3)
    out = hungarian_accuracy(preds, target, 10, 10)
    assert out["nmi"].item() == pytest.approx(normalized_mutual_info_score(target, preds), abs=1e-6)
    assert out["ari"].item() == pytest.approx(adjusted_rand_score(target, preds), abs=1e-6)


@pytest.mark.parametrize(
    ("preds", "target"),
    [
        ([0, 0, 0, 0], [1, 1, 1, 1]),  # neither labelling splits the data: sklearn says 1, 1
        ([0, 0, 0, 0], [0, 1, 2, 1]),  # one cluster, several classes: NMI 0, ARI 0
        ([0, 1, 2, 3], [0, 1, 2, 0]),  # singletons
        ([2, 2, 0, 0], [1, 1, 0, 0]),  # perfect clustering with an unused cluster id
        ([0, 1, 0, 1], [0, 0, 1, 1]),  # independent: MI is exactly 0
    ],
)
def test_degenerate_cases_match_sklearn(preds: list[int], target: list[int]) -> None:
    out = hungarian_accuracy(torch.tensor(preds), torch.tensor(target), 4, 3)
    assert out["nmi"].item() == pytest.approx(normalized_mutual_info_score(target, preds), abs=1e-7)
    assert out["ari"].item() == pytest.approx(adjusted_rand_score(target, preds), abs=1e-7)


def test_single_cluster_values() -> None:
    out = hungarian_accuracy(torch.zeros(5, dtype=torch.long), torch.tensor([0, 1, 1, 2, 1]), 1, 3)
    assert out["acc"].item() == pytest.approx(3 / 5)
    assert out["nmi"].item() == 0.0 and out["ari"].item() == 0.0
    assert out["matching"].tolist() == [1]


def test_invariant_to_relabelling_clusters() -> None:
    preds, target = _noisy_clustering(500, 7, 5, noise=0.5, seed=4)
    relabel = torch.randperm(7, generator=torch.Generator().manual_seed(5))
    base = hungarian_accuracy(preds, target, 7, 5)
    moved = hungarian_accuracy(relabel[preds], target, 7, 5)
    for key in ("acc", "nmi", "ari"):
        assert moved[key].item() == pytest.approx(base[key].item(), abs=1e-7)
    # The matching moves with the clusters: each sample still gets the same class.
    assert torch.equal(moved["matching"][relabel[preds]], base["matching"][preds])


def test_batches_accumulate_to_one_batch() -> None:
    preds, target = _noisy_clustering(1000, 10, 10, noise=0.5, seed=6)
    whole = HungarianAccuracy(10, 10)
    whole.update(preds, target)
    batched = HungarianAccuracy(10, 10)
    for p, t in zip(preds.split(37), target.split(37)):
        batched.update(p, t)
    assert torch.equal(batched.contingency, whole.contingency)
    assert int(batched.contingency.sum()) == 1000
    a, b = whole.compute(), batched.compute()
    assert all(torch.equal(a[key], b[key]) for key in a)
    functional = hungarian_accuracy(preds, target, 10, 10)
    assert all(torch.equal(a[key], functional[key]) for key in a)


@pytest.mark.parametrize("num_clusters,num_classes,seed", [(4, 4, 0), (5, 3, 1), (3, 5, 2), (10, 10, 3)])
def test_size_error_against_a_brute_force_matching(num_clusters: int, num_classes: int, seed: int) -> None:
    """size_error = max over clusters of |cluster share - share of the class it is matched to| (an unmatched cluster:
    its whole share), the matching being the accuracy's: checked against the best permutation found by brute force
    (scipy's linear_sum_assignment where K or C is 10) and numpy's shares."""
    from scipy.optimize import linear_sum_assignment

    rng = np.random.default_rng(seed)
    preds = rng.integers(0, num_clusters, 500)
    target = np.where(rng.random(500) < 0.6, preds % num_classes, rng.integers(0, num_classes, 500))
    counts = np.zeros((num_clusters, num_classes))
    np.add.at(counts, (preds, target), 1)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    matched = dict(zip(rows, cols))
    cluster_share, class_share = counts.sum(1) / 500, counts.sum(0) / 500
    expected = max(abs(cluster_share[k] - (class_share[matched[k]] if k in matched else 0.0))
                   for k in range(num_clusters))
    out = hungarian_accuracy(torch.as_tensor(preds), torch.as_tensor(target), num_clusters, num_classes)
    assert float(out["acc"]) == pytest.approx(counts[rows, cols].sum() / 500, abs=1e-6)  # the same matching
    assert float(out["size_error"]) == pytest.approx(expected, abs=1e-6)


def test_size_error_is_zero_for_a_relabelled_partition_and_the_class_gap_for_one_cluster() -> None:
    """A perfect clustering (any relabelling) has the classes' sizes: 0. All in one cluster of K = C = 2 with classes
    of 70 / 30 %: that cluster (100 %) is matched to the 70 % class, the empty one to the 30 % class: 0.3."""
    target = torch.tensor([0] * 7 + [1] * 3)
    assert float(hungarian_accuracy(1 - target, target, 2, 2)["size_error"]) == 0.0
    assert float(hungarian_accuracy(torch.zeros(10, dtype=torch.long), target, 2, 2)["size_error"]) == pytest.approx(0.3)


def test_match_clusters_against_brute_force() -> None:
    gen = torch.Generator().manual_seed(7)
    for num_clusters, num_classes in [(3, 3), (4, 2), (2, 4)]:
        table = torch.randint(0, 20, (num_clusters, num_classes), generator=gen)
        matching = match_clusters(table)
        matched = matching >= 0
        score = table[torch.arange(num_clusters)[matched], matching[matched]].sum().item()
        rows, cols = range(num_clusters), range(num_classes)
        best = max(
            sum(table[k, c].item() for k, c in zip(rows, perm)) if num_clusters <= num_classes
            else sum(table[k, c].item() for c, k in zip(cols, perm))
            for perm in itertools.permutations(cols if num_clusters <= num_classes else rows, min(num_clusters, num_classes))
        )
        assert score == best
        assert len(set(matching[matched].tolist())) == int(matched.sum())  # one-to-one


@pytest.mark.parametrize(
    ("preds", "target", "message"),
    [
        (torch.tensor([0, 3]), torch.tensor([0, 1]), r"`preds` must lie in \[0, num_clusters\) = \[0, 3\), got values in \[0, 3\]"),
        (torch.tensor([-1, 0]), torch.tensor([0, 1]), r"`preds` .* got values in \[-1, 0\]"),
        (torch.tensor([0, 1]), torch.tensor([0, 2]), r"`target` must lie in \[0, num_classes\) = \[0, 2\)"),
        (torch.tensor([0.0, 1.0]), torch.tensor([0, 1]), r"`preds` must hold integers"),
        (torch.tensor([0, 1]), torch.tensor([True, False]), r"`target` must hold integers"),
        (torch.tensor([0, 1, 2]), torch.tensor([0, 1]), r"same shape"),
    ],
)
def test_bad_inputs_raise(preds: torch.Tensor, target: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HungarianAccuracy(num_clusters=3, num_classes=2).update(preds, target)


@pytest.mark.parametrize("bad", [0, -2, 2.0, True])
def test_bad_sizes_raise(bad) -> None:
    with pytest.raises(ValueError, match="num_clusters"):
        HungarianAccuracy(num_clusters=bad, num_classes=2)


def test_docstring_examples() -> None:
    assert doctest.testmod(metrics, raise_on_error=False).failed == 0


# --- Distributed evaluation: 2 gloo processes, a data set of odd size -------------------------

NUM_SAMPLES = 1001


def _shard_and_score(rank: int, world_size: int) -> dict[str, dict]:
    """Score this process's shard under each sampler; the metric sums the shards' tables."""
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dataset = TensorDataset(*_noisy_clustering(NUM_SAMPLES, 10, 10, noise=0.5, seed=8))
    results = {}
    for name, sampler_cls in (("unrepeated", UnrepeatedDistributedSampler), ("torch", DistributedSampler)):
        sampler = sampler_cls(dataset, num_replicas=world_size, rank=rank, shuffle=False)
        metric = HungarianAccuracy(10, 10)
        for preds, target in DataLoader(dataset, batch_size=64, sampler=sampler):
            metric.update(preds, target)
        out = metric.compute()  # reduces the tables across processes
        with metric.sync_context():
            table = metric.contingency.tolist()
        results[name] = {"table": table, **{key: value.tolist() for key, value in out.items()}}
    return results


@pytest.mark.distributed
def test_two_processes_count_each_sample_once() -> None:
    preds, target = _noisy_clustering(NUM_SAMPLES, 10, 10, noise=0.5, seed=8)
    single = HungarianAccuracy(10, 10)
    single.update(preds, target)
    expected = {key: value.tolist() for key, value in single.compute().items()}

    rank0, rank1 = run_in_processes(_shard_and_score, 2)
    assert rank0 == rank1  # every process reports the same reduced result

    unrepeated = rank0["unrepeated"]
    assert int(np.sum(unrepeated["table"])) == NUM_SAMPLES
    assert unrepeated["table"] == single.contingency.tolist()
    assert {key: unrepeated[key] for key in expected} == expected  # exact equality, not approx

    # DistributedSampler pads 1001 samples to 1002 by repeating one: why evaluation avoids it.
    assert int(np.sum(rank0["torch"]["table"])) == NUM_SAMPLES + 1
