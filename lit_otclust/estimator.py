"""A scikit-learn estimator around the deep-clustering system, for arrays in memory.

:class:`OTClustering` fits the same :class:`~lit_otclust.system.DeepClustering` as ``python -m lit_otclust fit``:

.. math::
    \\min_{\\theta, \\phi, \\mu}\\ \\ell_r(\\theta, \\phi) + \\lambda\\, \\mathrm{OT}_\\varepsilon\\Big(
    \\tfrac{1}{m} \\sum_{i=1}^m \\delta_{f_\\theta(x_i)},\\ \\sum_{k=1}^K w_k\\, \\delta_{\\mu_k}\\Big)

over an autoencoder (encoder f_theta, decoder g_phi, reconstruction loss l_r) and K centers mu (K, p), on
batches of m samples, where ``OT_eps`` is the entropic optimal transport cost with squared Euclidean
ground cost and w the prescribed cluster proportions (Genevay, Dulac-Arnold, Vert, 2020). Its data module
(:meth:`~lit_otclust.data.ArrayDataModule.from_arrays`), phases (:class:`~lit_otclust.callbacks.PhaseSwitch`:
pre-training, then the k-means initialisation of mu) and seeds are the command line's; only the loggers,
checkpoints, pictures and progress bar are left out. A sample's cluster is ``argmin_k ||f(x) - mu_k||^2``.

On features ((n, d) arrays) the default is no autoencoder: size-constrained k-means in the input space
(:func:`~lit_otclust.clustering.constrained_kmeans`, the same entropic OT assignment with the centers as the only
parameters), whose assignment ``argmin_k ||x - mu_k||^2 - g_k`` meets w: on features it is the better default of the
two (RESULTS.md, "Arrays and features").
"""

from __future__ import annotations

import contextlib
import functools
import logging
import numbers
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import Tensor, nn

from lit_otclust.clustering import constrained_kmeans, embed_samples, kmeans
from lit_otclust.data import ArrayDataModule
from lit_otclust.losses import ClusteringLoss, OTLoss, SoftKMeans
from lit_otclust.models import ConvAutoencoder, MLPAutoencoder
from lit_otclust.phases import PhaseSwitch
from lit_otclust.sinkhorn import squared_distances
from lit_otclust.system import DeepClustering, adam, check_proportions

# Kept as they come (uint8 pixels are divided by 255, as the command line's ArrayDataModule does); any other
# dtype becomes float32, the autoencoder's.
_DTYPES = (np.float32, np.float64, np.uint8)
# Warnings about choices the caller of fit did not make and cannot change: the samples are in memory, where
# loader workers only cost (lit_otclust.data.base); the system keeps its autoencoder in its hyperparameters on
# purpose (lit_otclust.system); a deprecation inside Lightning's own code under this torch (as cli.py drops).
_NOT_THE_CALLERS = (r"The '\w+_dataloader' does not have many workers",
                    r"Attribute '(autoencoder|loss)' is an instance of `nn.Module`",
                    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                    # Lightning's hint wherever SLURM is installed: an in-process fit on one device is not a SLURM job
                    r"The `srun` command is available on your system but is not used")


class OTClustering(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator):
    """Deep clustering with entropic OT and cluster-size constraints, as a scikit-learn clusterer and transformer.

    ``fit(X)`` trains an autoencoder and ``n_clusters`` centers in its embedding (the module docstring);
    ``transform(X)`` is the embedding f(x), (n, latent_dim); ``predict(X)`` the nearest center of each
    embedding. With ``proportions`` w, each training batch's transport plan gives cluster k the share w_k of the
    batch, so the clusters learn those sizes; ``clustering="soft_kmeans"`` drops the size constraint (the
    entropic soft k-means loss, the paper's Prop. 2).

    X is an (n, d) array of features (a pretrained network's embeddings), or images (n, H, W), (n, C, H, W) or
    (n, H, W, C) (layout as :class:`~lit_otclust.data.ArrayDataModule` reads it, ``channels_last``); uint8 values
    are divided by 255, any other dtype is taken as it is. By default ``fit`` is quiet: no logger, no checkpoint, no
    file written, no progress bar.

    Args:
        n_clusters: K.
        proportions: w, the prescribed cluster proportions (K,), non-negative, summing to 1; None: uniform.
            Center k carries w_k; the k-means centers that start training are ordered so that the largest
            k-means cluster carries the largest w_k (:func:`lit_otclust.clustering.match_sizes`).
        clustering: ``"ot"`` (the paper's loss) or ``"soft_kmeans"`` (the same without the size constraint).
        epsilon: the entropic regularisation, in units of squared embedding distance.
        clustering_weight: lambda in l_r + lambda * l_c.
        sinkhorn_solver, sinkhorn_iters: the OT solve of each batch (:class:`~lit_otclust.losses.OTLoss`'s
            ``solver`` and ``iters``): ``"fixed"``, ``sinkhorn_iters`` warm-started iterations, is the fastest.
        autoencoder: ``"auto"`` (default): ``"none"`` for (n, d) features, ``"mlp"`` for images. ``"none"``: no
            embedding, the centers live in X's space: size-constrained k-means (:func:`~lit_otclust.clustering.\
            constrained_kmeans`, with ``kmeans_n_init`` restarts and ``epsilon`` relative to the mean squared
            distance to the nearest center), or k-means with ``clustering="soft_kmeans"``; ``transform`` is then X
            itself and the training settings below are unused. ``"mlp"`` (:class:`~lit_otclust.models.MLPAutoencoder`,
            any sample shape, flattened; flattened images are better passed so, or as images) or ``"conv"``
            (:class:`~lit_otclust.models.ConvAutoencoder`, images whose sides divide by 8).
        hidden_dims: the MLP encoder's hidden widths (the decoder mirrors them).
        latent_dim: p, the embedding's size.
        weight_init: the autoencoder's initial weights, ``"torch"`` (PyTorch's defaults, the configs') or
            ``"glorot"`` (TensorFlow's). Without pre-training, k-means starts from the untrained embedding, so this
            decides where the centers start. Neither was better on every data set measured: on the 2-d blobs of
            60 / 30 / 10 % of tests/test_estimator.py Glorot matched k-means' accuracy in 17 runs of 18 and
            PyTorch's in 8; on ``make_blobs([600, 300, 100], random_state=0)`` PyTorch's in 4 of 6, Glorot's in 2.
        max_epochs: training epochs in all, pre-training included.
        pretrain_epochs: reconstruction-only epochs before k-means initialises the centers and the
            clustering loss starts (0: k-means on the untrained encoder's embedding, the paper's Algorithm 2).
        batch_size: m, the samples of each OT problem; at most n (a smaller X trains on whole-set batches).
        lr: Adam's learning rate.
        kmeans_n_init: k-means++ restarts of the centers' initialisation.
        channels_last: the layout of a 4-d X; None guesses it (:class:`~lit_otclust.data.ArrayDataModule`).
        accelerator: Lightning's accelerator (``"auto"``: a GPU if there is one); one device.
        trainer_kwargs: more ``lightning.Trainer`` arguments, over the estimator's (e.g. ``{"logger": ...,
            "precision": "bf16-mixed"}``).
        verbose: Lightning's progress bar, model summary and info lines (which accelerator, why it stopped);
            False holds them back during ``fit``.
        random_state: seeds the autoencoder's initial weights, the batch order and k-means (an int seeds
            them as ``seed_everything`` does on the command line); None draws a seed from numpy's global state.

    Attributes:
        labels_: (n,) int64, each training sample's cluster.
        cluster_centers_: (K, latent_dim) float32, the centers mu in the embedding: ``predict(X)`` is the
            index of the row of ``cluster_centers_`` nearest each row of ``transform(X)`` (without an autoencoder,
            (K, d) in X's space, and the rule subtracts ``potentials_``).
        potentials_: (K,) float32, without an autoencoder: the plan's cluster potentials g, which make the
            nearest-center rule meet the proportions; zeros for k-means.
        module_: the trained :class:`~lit_otclust.system.DeepClustering` (on the CPU); None without an autoencoder.
        n_features_in_: X's second dimension seen by ``fit``.

    Example (the sizes as measured on a 2-core CPU; training's floating point differs between machines):
        >>> import numpy as np
        >>> from sklearn.datasets import make_blobs
        >>> X, _ = make_blobs([600, 300, 100], random_state=1)
        >>> model = OTClustering(3, proportions=[0.6, 0.3, 0.1], random_state=0).fit(X)  # features: no autoencoder
        >>> np.bincount(model.labels_)
        array([600, 300, 100])
        >>> model.cluster_centers_.shape
        (3, 2)
        >>> deep = OTClustering(3, proportions=[0.6, 0.3, 0.1], autoencoder="mlp", weight_init="glorot",
        ...                     max_epochs=20, random_state=0).fit(X)
        >>> deep.transform(X).shape, deep.cluster_centers_.shape
        ((1000, 10), (3, 10))
    """

    def __init__(
        self,
        n_clusters: int = 8,
        proportions: Sequence[float] | None = None,
        clustering: Literal["ot", "soft_kmeans"] = "ot",
        epsilon: float = 0.01,
        clustering_weight: float = 0.1,
        sinkhorn_solver: Literal["fixed", "solve", "algorithm1"] = "fixed",
        sinkhorn_iters: int = 10,
        autoencoder: Literal["auto", "none", "mlp", "conv"] = "auto",
        hidden_dims: Sequence[int] = (500, 250),
        latent_dim: int = 10,
        weight_init: Literal["torch", "glorot"] = "torch",
        max_epochs: int = 200,
        pretrain_epochs: int = 0,
        batch_size: int = 300,
        lr: float = 1e-3,
        kmeans_n_init: int = 20,
        channels_last: bool | None = None,
        accelerator: str = "auto",
        trainer_kwargs: dict[str, Any] | None = None,
        verbose: bool = False,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.proportions = proportions
        self.clustering = clustering
        self.epsilon = epsilon
        self.clustering_weight = clustering_weight
        self.sinkhorn_solver = sinkhorn_solver
        self.sinkhorn_iters = sinkhorn_iters
        self.autoencoder = autoencoder
        self.hidden_dims = hidden_dims
        self.latent_dim = latent_dim
        self.weight_init = weight_init
        self.max_epochs = max_epochs
        self.pretrain_epochs = pretrain_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.kmeans_n_init = kmeans_n_init
        self.channels_last = channels_last
        self.accelerator = accelerator
        self.trainer_kwargs = trainer_kwargs
        self.verbose = verbose
        self.random_state = random_state

    def fit(self, X: Any, y: None = None) -> OTClustering:
        """Train on X (n, d) or (n, *image_shape); ``y`` is ignored. Returns self."""
        X = validate_data(self, X, allow_nd=True, dtype=_DTYPES)
        self._check_params(len(X))
        seed = self._seed()
        if self._autoencoder_kind(X) == "none":
            return self._fit_centers(X, seed)
        data = ArrayDataModule.from_arrays(X, num_classes=self.n_clusters, channels_last=self.channels_last,
                                           batch_size=min(self.batch_size, len(X)), seed=seed)
        proportions = None if self.proportions is None else np.asarray(self.proportions, dtype=float).tolist()
        # The caller's torch RNG is left as it was; inside, the weights are drawn as the command line draws them
        # after seed_everything(seed).
        with torch.random.fork_rng(devices=[]), _quiet(self.verbose):
            torch.manual_seed(seed)
            system = DeepClustering(
                self._build_autoencoder(data.input_shape), num_clusters=self.n_clusters, loss=self._build_loss(),
                proportions=proportions, clustering_weight=self.clustering_weight,
                optimizer=functools.partial(adam, lr=self.lr))
            phases = PhaseSwitch(pretrain_epochs=self.pretrain_epochs, kmeans_n_init=self.kmeans_n_init, seed=seed)
            trainer = L.Trainer(callbacks=[phases], **self._trainer_settings())
            trainer.fit(system, datamodule=data)
        system.trainer = None  # the trainer holds the data module and its copy of X
        system.eval()
        self.module_ = system
        self.cluster_centers_ = system.centers.detach().cpu().numpy()
        self.labels_ = self._assign(self._embed(data.fit_set.x))
        return self

    def transform(self, X: Any) -> np.ndarray:
        """The embeddings f(x) of X, (n, latent_dim) float32 (X itself, as float32, without an autoencoder)."""
        return self._embed(self._samples(X)).cpu().numpy()

    def predict(self, X: Any) -> np.ndarray:
        """The cluster of each sample of X, (n,) int64: its embedding's nearest center (without an autoencoder,
        ``argmin_k ||x - mu_k||^2 - g_k``, the rule that meets the proportions)."""
        return self._assign(self._embed(self._samples(X)))

    def _fit_centers(self, X: np.ndarray, seed: int) -> OTClustering:
        """``autoencoder="none"``: the centers in X's space, by size-constrained k-means (or k-means)."""
        x = _features(X)
        K = self.n_clusters
        w = torch.full((K,), 1.0 / K) if self.proportions is None else torch.as_tensor(
            np.asarray(self.proportions, dtype=float))
        if self._build_loss().constrains_sizes:
            centers, g, _ = constrained_kmeans(x, w, self.kmeans_n_init, seed, epsilon=self.epsilon)
        else:  # no size constraint: k-means, and no potential
            centers, g = kmeans(x, K, self.kmeans_n_init, seed), torch.zeros(K)
        self.module_ = None
        self.cluster_centers_ = centers.numpy()
        self.potentials_ = g.numpy()
        self.labels_ = self._assign(x)
        return self

    @property
    def _n_features_out(self) -> int:
        """Columns of ``transform``'s output, for ``get_feature_names_out``."""
        return self.cluster_centers_.shape[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True  # (n, H, W) images
        tags.transformer_tags.preserves_dtype = ["float32"]  # the embedding is float32 whatever X was
        return tags

    # ---- helpers ------------------------------------------------------------------------------------------------
    def _check_params(self, num_samples: int) -> None:
        """What DeepClustering, PhaseSwitch and the data module do not check themselves, or check under other names."""
        if self.clustering not in ("ot", "soft_kmeans"):
            raise ValueError(f"clustering must be 'ot' or 'soft_kmeans', got {self.clustering!r}")
        if self.autoencoder not in ("auto", "none", "mlp", "conv"):
            raise ValueError(f"autoencoder must be 'auto', 'none', 'mlp' or 'conv', got {self.autoencoder!r}")
        if self.proportions is not None:  # the path without an autoencoder builds no DeepClustering, which checks it
            check_proportions(np.asarray(self.proportions, dtype=float).tolist(), self.n_clusters, "n_clusters")
        for name in ("n_clusters", "max_epochs", "batch_size", "latent_dim"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or value < (2 if name == "n_clusters" else 1):
                raise ValueError(f"{name} must be an integer >= {2 if name == 'n_clusters' else 1}, got {value!r}")
        if num_samples < self.n_clusters:
            raise ValueError(f"n_samples={num_samples} should be >= n_clusters={self.n_clusters}.")

    def _autoencoder_kind(self, X: np.ndarray) -> str:
        """``autoencoder`` with ``"auto"`` resolved: no autoencoder on (n, d) features, the MLP on images."""
        if self.autoencoder == "auto":
            return "none" if X.ndim == 2 else "mlp"
        return self.autoencoder

    def _seed(self) -> int:
        random_state = check_random_state(self.random_state)  # validates it, whatever it is
        if isinstance(self.random_state, numbers.Integral):
            return int(self.random_state)
        return int(random_state.randint(np.iinfo(np.int32).max))

    def _build_loss(self) -> ClusteringLoss:
        if self.clustering == "soft_kmeans":
            return SoftKMeans(self.epsilon)
        return OTLoss(self.epsilon, solver=self.sinkhorn_solver, iters=self.sinkhorn_iters)

    def _build_autoencoder(self, input_shape: tuple[int, ...]) -> nn.Module:
        if self.autoencoder == "conv":
            return ConvAutoencoder(input_shape, latent_dim=self.latent_dim, weight_init=self.weight_init)
        return MLPAutoencoder(input_shape, hidden_dims=tuple(self.hidden_dims), latent_dim=self.latent_dim,
                              weight_init=self.weight_init)

    def _trainer_settings(self) -> dict[str, Any]:
        quiet = dict(max_epochs=self.max_epochs, accelerator=self.accelerator, devices=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=self.verbose, enable_model_summary=self.verbose,
                     # labels_ and predict score after fit; no evaluation while training
                     limit_val_batches=0, num_sanity_val_steps=0)
        return {**quiet, **(self.trainer_kwargs or {})}

    def _samples(self, X: Any) -> Tensor:
        """X validated against the fitted shape and read as the data module reads it: float32 (n, *input_shape)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, allow_nd=True, dtype=_DTYPES)
        if self.module_ is None:  # centers in X's space
            return _features(X)
        input_shape = self.module_.autoencoder.input_shape
        data = ArrayDataModule.from_arrays(X, num_classes=len(self.cluster_centers_), channels_last=self.channels_last,
                                           batch_size=1, drop_last=False)
        if data.input_shape != input_shape:
            raise ValueError(f"X holds samples of shape {data.input_shape}; {type(self).__name__} was fitted on "
                             f"{input_shape}")
        data.setup()
        return data.fit_set.x

    def _embed(self, x: Tensor) -> Tensor:
        if self.module_ is None:
            return x
        return embed_samples(self.module_, x, ArrayDataModule.default_eval_batch_size)  # (n, p)

    def _assign(self, z: Tensor) -> np.ndarray:
        if self.module_ is None:
            centers, g = torch.as_tensor(self.cluster_centers_), torch.as_tensor(self.potentials_)
            return (squared_distances(z.float(), centers) - g).argmin(1).numpy()  # (n,)
        return self.module_.assign(z).cpu().numpy()  # (n,)


def _features(X: np.ndarray) -> Tensor:
    """X as the path without an autoencoder reads it: (n, d) float32, each sample flattened."""
    return torch.as_tensor(np.asarray(X, dtype=np.float32).reshape(len(X), -1))


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Within: the warnings of ``_NOT_THE_CALLERS`` ignored and, unless ``verbose``, Lightning's INFO lines held back;
    the caller's warning filters and logger level come back on exit."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    with warnings.catch_warnings():
        for message in _NOT_THE_CALLERS:
            warnings.filterwarnings("ignore", message=message)
        if not verbose:
            logger.setLevel(logging.WARNING)
        try:
            yield
        finally:
            logger.setLevel(level)
