"""Committed studies name flags of before the clustering loss became ``model.loss``: :func:`translate` rewrites them into
today's (``--model.clustering soft_kmeans --model.epsilon 0.05`` into ``--model.loss.class_path
lit_otclust.losses.SoftKMeans --model.loss.init_args.epsilon 0.05``), so such a study builds runnable commands; an
option since retired fails with :class:`RetiredOption`, naming where its result is. The tables are
:mod:`lit_otclust.legacy`'s, which the command line checks against.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lit_otclust.legacy import LOSSES, MOVED, MOVED_OT, RETIRED, retired_message


class RetiredOption(ValueError):
    """A flag names an option that measurement showed no help; the message says where its result is."""


def translate(config: str, settings: dict[str, str]) -> dict[str, str]:
    """``settings`` (overrides ``{key: value}`` of a fit of ``config``) with the old keys replaced by today's, in order,
    the loss's class first. Raises ValueError on a retired option."""
    if retired := [key for key in settings if key in RETIRED]:
        raise RetiredOption(f"{config}: {retired_message(retired[0])}")
    out = {key: value for key, value in settings.items() if key not in MOVED and key not in MOVED_OT}
    kind = settings.get("model.clustering")
    if kind is not None:
        out.pop("model.clustering")
    moved = {key: name for key, name in (MOVED | MOVED_OT).items() if key in settings}
    if kind is not None:
        loss = LOSSES.get(kind)  # None: "none"
    else:
        loss = _config_loss(config) if moved else None
    if loss != LOSSES["ot"]:
        moved = {key: name for key, name in moved.items() if key in MOVED}
    new = {}
    if kind is not None:
        new = {"model.loss": "null"} if loss is None else {"model.loss.class_path": loss}
    if loss is not None:
        new |= {f"model.loss.init_args.{name}": settings[key] for key, name in moved.items()}
    return {**new, **out}


def _config_loss(config: str) -> str | None:
    """The loss class a config file names (None: AE + k-means)."""
    loss = ((yaml.safe_load(Path(config).read_text()) or {}).get("model") or {}).get("loss")
    return loss.get("class_path") if isinstance(loss, dict) else None
