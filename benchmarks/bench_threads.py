"""How torch's thread settings fare when other work shares the cores.

    python -m benchmarks.bench_threads --data-dir ../shared/data [--repeats 1]

Times one short ``fit`` (``configs/mnist_ot.yaml``, one epoch on the 10k test split: 33 steps, the
k-means init and one evaluation; no loggers, no progress bar) as a whole process under three
environments, alternately: torch's default threads (all cores), ``OMP_NUM_THREADS=1``, and the
default threads with ``OMP_WAIT_POLICY=PASSIVE``. Run it once on an idle machine and once while
other processes keep the cores busy (e.g. a sweep): torch's OpenMP threads spin-wait for each other
at every parallel region, and when another process holds one of the cores the waits last a
scheduler time slice.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from benchmarks.bench_fit import timed

SETTINGS = {"default threads": {}, "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"},
            "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    base["WANDB_MODE"] = "disabled"
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for r in range(args.repeats):
        for name, extra in list(SETTINGS.items())[:: 1 if r % 2 == 0 else -1]:
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [sys.executable, "-m", "lit_otclust", "fit", "--config", "configs/mnist_ot.yaml",
                       "--data.data_dir", os.path.abspath(args.data_dir), "--data.init_args.fit_split", "test",
                       "--trainer.max_epochs", "1", "--trainer.logger", "false", "--trainer.enable_progress_bar",
                       "false", "--trainer.default_root_dir", tmp]
                times[name].append(timed(cmd, {**base, **extra})[0])
    for name, values in times.items():
        print(f"  {name:24s}: {statistics.median(values):6.1f} s  ({', '.join(f'{v:.1f}' for v in values)})")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
