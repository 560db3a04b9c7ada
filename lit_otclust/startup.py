"""What the entry point needs before torch and Lightning are imported, so nothing here may import either: the
SIGTERM recorder, and W&B's mode where there are no credentials."""

from __future__ import annotations

import netrc
import os

_sigterm = False  # this process received SIGTERM and no run has stopped for it yet


def record_sigterm(signum: int, frame: object) -> None:
    """SIGTERM's handler: only records the signal (no collective, no I/O, not even logging, whose locks the
    interrupted code may hold). The entry point installs it before its imports for ``fit``, so that a SIGTERM during
    start-up is acted on at the first training batch, and one after the trainer restored its handlers (a rank still
    exiting when a late signal arrives) cannot kill the process before it exits 143."""
    global _sigterm
    _sigterm = True


def sigterm_received() -> bool:
    return _sigterm


def clear_sigterm() -> None:
    """A stop answered the signal: a later fit in this process starts clean."""
    global _sigterm
    _sigterm = False


def wandb_credentials_found() -> bool:
    """True if W&B can authenticate without asking: an API key in the environment or ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        host = os.environ.get("WANDB_BASE_URL", "api.wandb.ai").split("//")[-1]
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def resolve_wandb_mode() -> str | None:
    """Set ``WANDB_MODE`` as this run's W&B will use it, and return it: an empty value (``WANDB_MODE= lit-otclust
    fit ...``, which W&B rejects with a validation traceback) reads as unset, and unset without credentials is
    ``offline`` (online W&B would prompt for a key, or hang without network). Idempotent."""
    if os.environ.get("WANDB_MODE") == "":
        del os.environ["WANDB_MODE"]
    if "WANDB_MODE" not in os.environ and not wandb_credentials_found():
        os.environ["WANDB_MODE"] = "offline"
    return os.environ.get("WANDB_MODE")
