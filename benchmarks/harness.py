"""What every benchmark here shares: runs alternated round by round, medians, processes timed, one table printed.

A machine whose speed drifts (other work on its cores, a laptop's clock) weighs on every variant alike when the
variants run in turn, A B C, B C A, C A B, ..., and each figure is the median over the rounds.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[1]
K, T = TypeVar("K"), TypeVar("T")


def rotated(names: list[K], round_index: int) -> list[K]:
    """``names`` started at ``round_index`` (mod their number): each goes first in turn."""
    first = round_index % len(names)
    return names[first:] + names[:first]


def alternate(runs: Mapping[K, Callable[[], T]], rounds: int, log: bool = True) -> dict[K, list[T]]:
    """Each of ``runs`` (name -> a call returning a measurement) once a round, in an order rotated each round."""
    out: dict[K, list[T]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in rotated(list(runs), r):
            out[name].append(runs[name]())
            if log:
                print(f"  round {r} {name}: {out[name][-1]}", flush=True)
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


def child_env(threads: int | None = None) -> dict[str, str]:
    """The environment of a timed process: W&B offline (unless set) and quiet; ``threads`` sets OMP_NUM_THREADS."""
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "WANDB_SILENT": "true"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def timed(cmd: list[str], env: Mapping[str, str], cwd: Path = REPO) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + sys of the child and its children) and stdout of one command run from
    ``cwd`` (the repository root); raises with the end of its stderr where it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=dict(env), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.stdout


def table(header: list[str], rows: list[list[str]]) -> None:
    """Print ``rows`` under ``header``, columns padded to their widest cell."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  " + " | ".join(str(cell).rjust(w) for cell, w in zip(row, widths)))
