"""Which center carries which proportion: the matchings, PhaseSwitch's use of them,
the two-digit data sets they are studied on, and the sweep's list-valued overrides."""

from __future__ import annotations

import itertools
from pathlib import Path

import lightning as L
import pytest
import torch
import torchvision

from lit_otclust.lab import studies
from lit_otclust.clustering import kmeans, match_sizes
from lit_otclust.data import MNISTDataModule, geometric_proportions
from lit_otclust.losses import OTLoss
from lit_otclust.models import MLPAutoencoder
from lit_otclust.phases import PhaseSwitch
from lit_otclust.system import DeepClustering

REPO = Path(__file__).resolve().parents[1]


def _brute_force(score, K: int, best=min) -> tuple[float, list[tuple[int, ...]]]:
    """The best score over all permutations of K, and every permutation reaching it."""
    scores = {perm: score(perm) for perm in itertools.permutations(range(K))}
    top = best(scores.values())
    return top, [perm for perm, s in scores.items() if abs(s - top) < 1e-12]


# ---- the matchings alone ----------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3, 4, 5])
@pytest.mark.parametrize("seed", range(5))
def test_match_sizes_is_the_best_permutation_by_brute_force(K: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.rand(K, generator=gen, dtype=torch.float64)
    sizes /= sizes.sum()
    w = torch.rand(K, generator=gen, dtype=torch.float64)
    w /= w.sum()
    order = match_sizes(sizes, w)
    assert sorted(order.tolist()) == list(range(K))
    top, argmins = _brute_force(lambda perm: sum((sizes[j] - w[k]).item() ** 2 for k, j in enumerate(perm)), K)
    assert argmins == [tuple(order.tolist())]  # distinct random sizes: a unique optimum, and it is ours
    # The rearrangement inequality: the matched sizes rank as the proportions do.
    assert torch.equal(torch.argsort(sizes[order]), torch.argsort(w))


@pytest.mark.parametrize("K", [2, 3, 7, 10])
def test_uniform_or_tied_proportions_keep_the_kmeans_order(K: int) -> None:
    gen = torch.Generator().manual_seed(K)
    sizes = torch.rand(K, generator=gen)
    sizes /= sizes.sum()
    uniform = torch.full((K,), 1.0 / K)
    assert torch.equal(match_sizes(sizes, uniform), torch.arange(K))
    # Ties in part of w: the tied centers keep their k-means order among themselves.
    w = torch.tensor([0.5] + [0.5 / (K - 1)] * (K - 1))
    order = match_sizes(sizes, w)
    assert order[0] == sizes.argmax() and order[1:].tolist() == sorted(order[1:].tolist())


# ---- PhaseSwitch's order on blobs whose answer is known ---------------------------------------

W_BLOBS = torch.tensor([0.1, 0.7, 0.2])  # class k has proportion w_k
MEANS = torch.tensor([[0.0, 0.0], [20.0, 0.0], [0.0, 20.0]])  # class k's blob, far apart


def _blobs(n: int = 1000) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """z (n, 2) of three well-separated blobs with sizes n w, labels (n,), and k-means centers (3, 2)
    put in a known wrong order (class 2's blob first, then 0's, then 1's)."""
    gen = torch.Generator().manual_seed(0)
    labels = torch.repeat_interleave(torch.arange(3), (W_BLOBS * n).round().long())
    z = MEANS[labels] + torch.randn(len(labels), 2, generator=gen)
    centers = kmeans(z, 3, n_init=2, seed=0)
    blob = torch.cdist(centers, MEANS).argmin(1)  # (3,): the blob of each k-means center
    centers = centers[torch.argsort(blob)][torch.tensor([2, 0, 1])]
    return z, labels, centers


def _blob_of(centers: torch.Tensor) -> list[int]:
    return torch.cdist(centers, MEANS).argmin(1).tolist()


def test_sizes_put_each_proportion_on_the_blob_of_that_size() -> None:
    z, labels, centers = _blobs()
    assert _blob_of(centers) == [2, 0, 1]  # the k-means order is wrong to begin with
    order = PhaseSwitch(match_proportions="sizes").center_order(z, centers, W_BLOBS)
    assert _blob_of(centers[order]) == [0, 1, 2]
    assert PhaseSwitch(match_proportions="none").center_order(z, centers, W_BLOBS).tolist() == [0, 1, 2]


# ---- PhaseSwitch in a fit ---------------------------------------------------------------------


class _Recording(PhaseSwitch):
    """Keeps the embeddings and the centers of its last initialisation, before any training step."""

    def init_centers(self, trainer, pl_module) -> None:
        super().init_centers(trainer, pl_module)
        with torch.no_grad():
            self.z = pl_module.autoencoder.encoder(trainer.datamodule.fit_set.x)
        self.centers = pl_module.centers.detach().clone()


def _fit(data_dir, switch: PhaseSwitch, proportions, **data) -> DeepClustering:
    L.seed_everything(0)
    dm = MNISTDataModule(str(data_dir), download=False, fit_split="test", batch_size=100, **data)
    module = DeepClustering(MLPAutoencoder(), num_clusters=len(proportions) if proportions else 10, loss=OTLoss(),
                            proportions=proportions)
    L.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
              callbacks=[switch], enable_progress_bar=False, enable_model_summary=False).fit(module, datamodule=dm)
    return module


def _ranked_alike(sizes: torch.Tensor, w: torch.Tensor) -> bool:
    """A larger w_k never sits on a smaller cluster: the sorted sizes follow the sorted w."""
    return all(sizes[k] >= sizes[j] for k in range(len(w)) for j in range(len(w)) if w[k] > w[j])


def test_phase_switch_matches_the_kmeans_sizes_to_the_proportions_on_imbalanced_mnist(data_dir) -> None:
    w = geometric_proportions(10, 10.0)
    # k-means' start (under a non-uniform w the default is size-constrained k-means'), the switch's centers, not
    # the last epoch's refit
    switch = _Recording(pretrain_epochs=0, kmeans_n_init=2, seed=0, match_proportions="sizes", center_init="kmeans",
                        refit_epochs=[])
    _fit(data_dir, switch, w, subset=400, class_proportions=w)
    sizes = torch.bincount(torch.cdist(switch.z, switch.centers).argmin(1), minlength=10)
    assert _ranked_alike(sizes, torch.tensor(w))
    # The same centers as k-means', reordered; in k-means' own order the ranks disagree.
    unordered = kmeans(switch.z, 10, 2, 0)
    assert sorted(map(tuple, unordered.tolist())) == sorted(map(tuple, switch.centers.tolist()))
    assert not _ranked_alike(torch.bincount(torch.cdist(switch.z, unordered).argmin(1), minlength=10), torch.tensor(w))


def test_uniform_proportions_give_bit_identical_centers_to_no_matching(data_dir) -> None:
    runs = [_fit(data_dir, PhaseSwitch(kmeans_n_init=1, match_proportions=m), None, subset=300) for m in ("sizes", "none")]
    assert torch.equal(runs[0].centers, runs[1].centers)


def test_matching_settings_are_checked(data_dir) -> None:
    with pytest.raises(ValueError, match="match_proportions"):
        PhaseSwitch(match_proportions="hungarian")
    with pytest.raises(ValueError, match="match_proportions"):
        PhaseSwitch(match_proportions="labels")  # retired: no study used it


# ---- two digits: the data module's ``classes`` -------------------------------------------------


def test_classes_keep_those_digits_relabelled_in_the_order_given(data_dir) -> None:
    raw = torchvision.datasets.MNIST(str(data_dir), train=False, download=False)  # a second code path
    module = MNISTDataModule(str(data_dir), download=False, fit_split="test", classes=[8, 3], batch_size=100)
    assert module.num_classes == 2
    module.setup()
    keep = (raw.targets == 8) | (raw.targets == 3)
    torch.testing.assert_close(module.fit_set.x, raw.data[keep].reshape(-1, 784).float() / 255, atol=0, rtol=0)
    assert torch.equal(module.fit_set.y, (raw.targets[keep] == 3).long())  # 8 -> 0, 3 -> 1
    # With class_proportions, classes[i] gets class_proportions[i]: the 80% class (8) is kept whole.
    module = MNISTDataModule(str(data_dir), download=False, fit_split="test", classes=[3, 8],
                             class_proportions=[0.2, 0.8], batch_size=100)
    module.setup()
    n8 = int((raw.targets == 8).sum())
    assert torch.bincount(module.fit_set.y).tolist() == [int(0.2 * n8 / 0.8), n8]
    for bad in ([3], [3, 3], [3, 10]):
        with pytest.raises(ValueError, match="classes"):
            MNISTDataModule(download=False, classes=bad)
    with pytest.raises(ValueError, match="class_proportions"):
        MNISTDataModule(download=False, classes=[1, 2], class_proportions=[0.1] * 10)


def test_the_sweep_passes_list_overrides_and_classes_set_the_clusters(data_dir, tmp_path, monkeypatch) -> None:
    """The command a study builds from list overrides (``set: {model.proportions: [0.2, 0.8]}``) gives the CLI
    those lists, and ``data.classes`` sets the model's number of clusters through the CLI's link."""
    from lit_otclust.cli import OTClusterCLI

    overrides = {"data.init_args.classes": [1, 2], "data.init_args.class_proportions": [0.2, 0.8],
                 "model.proportions": [0.2, 0.8], "data.init_args.data_dir": str(data_dir)}
    study = studies.parse_study({"out": str(tmp_path), "configs": [str(REPO / "configs" / "mnist_ot.yaml")],
                                 "set": overrides, "grid": {"phases.match_proportions": ["sizes", "none"]}})
    commands = [run.command() for run in study.runs]
    assert len(commands) == 2
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                       args=[*commands[0][4:], "--trainer.logger", "false"])
    assert cli.datamodule.classes == [1, 2] and cli.datamodule.class_proportions == [0.2, 0.8]
    assert cli.model.centers.shape[0] == 2 and cli.model.hparams.num_clusters == 2
    torch.testing.assert_close(cli.model.proportions, torch.tensor([0.2, 0.8]))
    assert cli.trainer.callbacks and any(getattr(cb, "match_proportions", None) == "sizes" for cb in cli.trainer.callbacks)
