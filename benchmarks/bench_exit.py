"""How long a ``fit`` process takes to exit after its last atexit handler: the interpreter's shutdown.

    python -m benchmarks.bench_exit --data-dir ../shared/data --pairs 3

Runs the smoke config (``configs/smoke.yaml``, seconds of training) alternately through
``lit_otclust.cli.console`` (the entry point of ``python -m lit_otclust`` and ``lit-otclust``, which
calls ``gc.freeze()`` after the imports) and ``lit_otclust.cli.main`` (the same run, nothing frozen).
An atexit handler registered before any other (so it runs last) writes the time; the parent takes
the time the process ended. The gap is the shutdown's walk over the objects the imports built.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHILD = """import atexit, os, time
atexit.register(lambda: open(os.environ["EXIT_STAMP"], "w").write(repr(time.time())))  # first registered: runs last
from lit_otclust.cli import {entry}
{entry}()
"""


def exit_gap(entry: str, data_dir: str, tmp: Path) -> float:
    stamp = tmp / "exit_time"
    cmd = [sys.executable, "-c", CHILD.format(entry=entry), "fit", "--config", "configs/smoke.yaml",
           "--data.data_dir", data_dir, "--trainer.default_root_dir", str(tmp / entry)]
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "EXIT_STAMP": str(stamp)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    end = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"{entry} failed:\n{proc.stderr[-2000:]}")
    return end - float(stamp.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    gaps: dict[str, list[float]] = {"console": [], "main": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            for entry in (("console", "main") if i % 2 == 0 else ("main", "console")):
                gaps[entry].append(exit_gap(entry, args.data_dir, Path(tmp)))
                print(f"pair {i} {entry:7s}: exit {gaps[entry][-1]:.2f} s", flush=True)
    for entry, values in gaps.items():
        print(f"{entry:7s} ({'gc.freeze()' if entry == 'console' else 'nothing frozen'}): median exit "
              f"{statistics.median(values):.2f} s over {len(values)} runs")


if __name__ == "__main__":
    main()
