"""What the entry point needs before torch and Lightning are imported, so nothing here may import either: SIGTERM
held for a batch boundary, and W&B's mode where there are no credentials."""

from __future__ import annotations

import netrc
import os
import signal

_sigterm = False  # this process received SIGTERM and no run has stopped for it yet


def hold_sigterm() -> None:
    """Block SIGTERM in the calling thread, before any other thread exists, so every thread inherits the block: a
    SIGTERM stays pending until the fit reads it at a batch boundary (:func:`take_sigterm`), never interrupting a
    collective or a socket read. Where threads cannot mask signals (Windows), nothing."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def record_sigterm(signum: int, frame: object) -> None:
    """SIGTERM's handler where it is not blocked (a fit started in-process, not by the entry point): only records
    the signal (no collective, no I/O, not even logging, whose locks the interrupted code may hold)."""
    global _sigterm
    _sigterm = True


def take_sigterm() -> bool:
    """Whether this process received SIGTERM: recorded by :func:`record_sigterm`, or pending while blocked (taken
    off the pending set here, so it is answered once)."""
    global _sigterm
    if hasattr(signal, "sigtimedwait") and signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        if signal.sigtimedwait({signal.SIGTERM}, 0) is not None:
            _sigterm = True
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
    """Set ``WANDB_MODE`` as this run's W&B will use it, and return it: an empty value (which W&B rejects) reads as
    unset, and unset without credentials is ``offline`` (online W&B would prompt for a key). Idempotent."""
    if os.environ.get("WANDB_MODE") == "":
        del os.environ["WANDB_MODE"]
    if "WANDB_MODE" not in os.environ and not wandb_credentials_found():
        os.environ["WANDB_MODE"] = "offline"
    return os.environ.get("WANDB_MODE")
