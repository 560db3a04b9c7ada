"""Entry point of ``python -m lit_otclust`` and of the ``lit-otclust`` script."""

import sys

from lit_otclust.startup import hold_sigterm

if sys.argv[1:2] == ["fit"]:
    # First, before any thread exists: SIGTERM waits, pending, until the fit takes it at a batch boundary all DDP
    # ranks agree on (lit_otclust.checkpointing.SignalCheckpoint); a SIGTERM at start-up or during the exit is held.
    hold_sigterm()

from lit_otclust.cli import console  # noqa: E402

if __name__ == "__main__":
    console()
