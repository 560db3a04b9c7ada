"""Entry point of ``python -m lit_otclust`` and of the ``lit-otclust`` script."""

import signal
import sys

from lit_otclust.startup import record_sigterm

if sys.argv[1:2] == ["fit"]:
    # Before the imports (seconds): from here to the exit a SIGTERM is recorded, not fatal, and the fit acts on it at
    # a batch boundary all DDP ranks agree on (lit_otclust.checkpointing.SignalCheckpoint).
    signal.signal(signal.SIGTERM, record_sigterm)

from lit_otclust.cli import console  # noqa: E402

if __name__ == "__main__":
    console()
