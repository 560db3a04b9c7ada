"""The paper's autoencoders, as plain ``nn.Module``s passed to the system.

Each exposes ``encoder`` (x -> z, z of shape (B, latent_dim)), ``decoder`` (z -> x_hat, the
shape of x) and ``latent_dim``, which is all :class:`lit_otclust.system.DeepClustering` uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn

WeightInit = Literal["torch", "glorot"]


def _init_weights(module: nn.Module, weight_init: WeightInit) -> None:
    """``glorot``: Glorot-uniform weights and zero biases, TensorFlow/Keras' defaults, which the paper's TensorFlow
    code most likely had; ``torch``: PyTorch's defaults (Kaiming-uniform with a = sqrt(5))."""
    if weight_init == "torch":
        return
    if weight_init != "glorot":
        raise ValueError(f"`weight_init` must be 'torch' or 'glorot', got {weight_init!r}")
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)


def autoencoder_state(checkpoint: dict) -> dict[str, Tensor]:
    """The autoencoder's ``state_dict`` inside a Lightning checkpoint of
    :class:`lit_otclust.system.DeepClustering`: its ``autoencoder.*`` entries, the prefix dropped."""
    return {k.removeprefix("autoencoder."): v for k, v in checkpoint["state_dict"].items()
            if k.startswith("autoencoder.")}


def _load_weights(module: nn.Module, weights: str | None) -> None:
    """Trained weights from ``weights``: a Lightning checkpoint of :class:`lit_otclust.system.DeepClustering` (its
    ``autoencoder.*`` entries), or the autoencoder's own ``state_dict``, loaded strictly. The file is unpickled (a
    Lightning checkpoint pickles its hyperparameters): load files you trust."""
    if weights is None:
        return
    if not Path(weights).is_file():
        where = "" if Path(weights).is_absolute() else f" (relative to {Path.cwd()})"
        raise FileNotFoundError(f"`weights`: no file {weights}{where}: run the pre-training that writes it first, or "
                                f"set --model.autoencoder.init_args.weights to its checkpoint")
    state = torch.load(weights, map_location="cpu", weights_only=False)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):  # a Lightning checkpoint
        state = autoencoder_state(state)
    try:
        module.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as err:
        raise ValueError(f"`weights` {weights} does not fit this {type(module).__name__}: {err}") from None


def _mlp(widths: Sequence[int], last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (w_in, w_out) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(w_in, w_out))
        if i < len(widths) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class MLPAutoencoder(nn.Module):
    """Fully connected autoencoder, ``d-500-250-p`` and its mirror (the paper's MNIST model).

    The reconstruction is linear (no activation), so the decoder can output any pixel scaling. The latent layer is
    linear by default, as in DEC/DKM; the paper's "500-250-10-250-500 structure and ReLU activation" can also be read
    as a ReLU on it (``latent_activation="relu"``).

    Args:
        input_shape: shape of one sample; it is flattened, e.g. ``(784,)`` or ``(1, 28, 28)``.
        hidden_dims: widths of the encoder's hidden layers; the decoder mirrors them.
        latent_dim: p, the size of the embedding.
        weight_init: ``torch`` (PyTorch's layer defaults) or ``glorot`` (TensorFlow's).
        latent_activation: ``linear`` (none, the default) or ``relu`` on the embedding.
        weights: a file of trained weights (:func:`_load_weights`), e.g. a pre-training made elsewhere that a run
            clusters with ``phases.pretrain_epochs: 0``. Its checkpoints name the file; where it is gone, set null.
    """

    def __init__(self, input_shape: Sequence[int] = (784,), hidden_dims: Sequence[int] = (500, 250),
                 latent_dim: int = 10, weight_init: WeightInit = "torch",
                 latent_activation: Literal["linear", "relu"] = "linear", weights: str | None = None) -> None:
        super().__init__()
        if latent_dim < 1 or any(h < 1 for h in hidden_dims):
            raise ValueError(f"latent_dim and hidden_dims must be >= 1, got {latent_dim}, {list(hidden_dims)}")
        if latent_activation not in ("linear", "relu"):
            raise ValueError(f"`latent_activation` must be 'linear' or 'relu', got {latent_activation!r}")
        self.input_shape = tuple(input_shape)
        self.latent_dim = latent_dim
        dims = [prod(self.input_shape), *hidden_dims, latent_dim]
        self.encoder = nn.Sequential(nn.Flatten(), _mlp(dims, last_activation=latent_activation == "relu"))
        self.decoder = nn.Sequential(_mlp(dims[::-1], last_activation=False), nn.Unflatten(1, self.input_shape))
        _init_weights(self, weight_init)
        _load_weights(self, weights)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.encoder(x)  # (B, p)
        return z, self.decoder(z)


class ConvAutoencoder(nn.Module):
    """Convolutional autoencoder (the paper's CIFAR-10 model).

    Encoder: stride-2 convolutions (``channels``, ``kernel_sizes``), ReLU, then a linear layer to ``latent_dim``.
    Decoder: a linear layer back to the last feature map, then the mirror transposed convolutions, the last without
    activation. Paddings ``k // 2`` make each layer halve or double the side exactly: 32 -> 16 -> 8 -> 4 and back.

    Args:
        input_shape: ``(C, H, W)`` with H and W divisible by ``2 ** len(channels)``.
        channels: output channels of the encoder's convolutions.
        kernel_sizes: their kernel sizes (odd).
        latent_dim: p, the size of the embedding.
        weight_init: ``torch`` (PyTorch's layer defaults) or ``glorot`` (TensorFlow's).
        weights: a file of trained weights for this architecture (:class:`MLPAutoencoder`'s ``weights``).
    """

    def __init__(self, input_shape: Sequence[int] = (3, 32, 32), channels: Sequence[int] = (32, 64, 128),
                 kernel_sizes: Sequence[int] = (5, 5, 3), latent_dim: int = 10,
                 weight_init: WeightInit = "torch", weights: str | None = None) -> None:
        super().__init__()
        if len(input_shape) != 3:
            raise ValueError(f"ConvAutoencoder needs input_shape (C, H, W), got {tuple(input_shape)}")
        if len(channels) != len(kernel_sizes):
            raise ValueError(f"channels {list(channels)} and kernel_sizes {list(kernel_sizes)} differ in length")
        c_in, h, w = input_shape
        scale = 2 ** len(channels)
        if h % scale or w % scale:
            raise ValueError(f"input side {h}x{w} must be divisible by {scale} for {len(channels)} stride-2 layers")
        self.input_shape = tuple(input_shape)
        self.latent_dim = latent_dim
        feat_shape = (channels[-1], h // scale, w // scale)

        enc: list[nn.Module] = []
        for c_prev, c, k in zip([c_in, *channels[:-1]], channels, kernel_sizes):
            enc += [nn.Conv2d(c_prev, c, k, stride=2, padding=k // 2), nn.ReLU()]
        self.encoder = nn.Sequential(*enc, nn.Flatten(), nn.Linear(prod(feat_shape), latent_dim))

        dec: list[nn.Module] = [nn.Linear(latent_dim, prod(feat_shape)), nn.ReLU(), nn.Unflatten(1, feat_shape)]
        outs = [*channels[-2::-1], c_in]
        for i, (c_prev, c, k) in enumerate(zip(channels[::-1], outs, kernel_sizes[::-1])):
            dec.append(nn.ConvTranspose2d(c_prev, c, k, stride=2, padding=k // 2, output_padding=1))
            if i < len(channels) - 1:
                dec.append(nn.ReLU())
        self.decoder = nn.Sequential(*dec)
        _init_weights(self, weight_init)
        _load_weights(self, weights)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.encoder(x)  # (B, p)
        return z, self.decoder(z)
