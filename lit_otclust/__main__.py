"""Entry point of ``python -m lit_otclust`` and of the ``lit-otclust`` script."""

import gc
import sys

# No cyclic garbage collection while the imports run: torch, Lightning and torchmetrics build about a million
# objects, and each of the generation-2 passes that their allocations trigger walks all of them: 0.75 s of every
# run's start on 2 cores, for no garbage found (benchmarks/README.md, benchmarks/results/bench_startup_gcoff.txt).
# console() freezes what the imports built and turns the collector back on. Here, not in
# lit_otclust.cli: importing the library must not change the collector of the process that imports it.
gc.disable()

from lit_otclust.startup import import_wandb_launch_early, start_wandb_service_early  # noqa: E402

# Before torch and Lightning: W&B's Launch module scans every loaded module as it imports, and W&B's service process
# boots on another core while they import (startup.py).
if __name__ == "__main__" or sys.argv[0].endswith("lit-otclust"):
    import_wandb_launch_early(sys.argv[1:])
    start_wandb_service_early(sys.argv[1:])

from lit_otclust.cli import console  # noqa: E402

if __name__ == "__main__":
    console()
