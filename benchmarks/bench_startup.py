"""The fixed cost of a ``fit`` process that the bare loop does not pay: its imports, and W&B's start.

    python -m benchmarks.bench_startup [--repeats 3]
    python -m benchmarks.bench_startup --garbage   (what a gc.collect() after the imports would free)
    python -m benchmarks.bench_startup --cli       (the command line's parsing with one subcommand parser or four)

Each figure is a fresh interpreter, run alternately ``repeats`` times, median printed:

- imports of the bare loop (torch, torchvision, scipy, sklearn, the model and the OT loss) against
  those of ``fit`` (the same plus Lightning, the CLI, W&B, matplotlib and the pictures), each with
  the cyclic garbage collector on (as a plain script runs) and off (``gc.disable()`` first, as
  ``lit_otclust.__main__`` runs them), and the last with ``gc.freeze()`` after them, a ``gc.collect()`` before it
  or not (what ``lit_otclust.cli.console`` does);
- ``wandb.init`` offline and ``finish`` with everything else already imported, and the seconds of the
  imports W&B makes inside ``init`` (``-X importtime``, modules first imported during the call);
- the fit's imports (gc off) and one offline ``wandb.init``, as one process, with W&B's Launch module imported
  where ``init`` imports it and imported first, before torch (as ``lit_otclust.__main__`` does for a run that
  logs to W&B), and with W&B's service also started in a thread before torch's import
  (``lit_otclust.startup.start_wandb_service_early``, as ``lit_otclust.__main__`` does too).

``--cli`` times instead, in this process, ``OTClusterCLI`` parsing and instantiating ``fit --config
configs/mnist_ot.yaml`` (W&B off, nothing run) as it does, building the named subcommand's parser only, and with
Lightning's four (fit, validate, test, predict), alternately, ``repeats`` times each after one of each to warm up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_fit import REPO

BARE = "import torch, torchvision, numpy, scipy.optimize, sklearn.cluster, lit_otclust.models, lit_otclust.losses"
FIT = (BARE + "; import lit_otclust.cli, lit_otclust.figures, lit_otclust.system, lit_otclust.data, "
       "lit_otclust.callbacks, wandb, matplotlib.pyplot")
OFF = "import gc; gc.disable(); "
WANDB = FIT + """
import json, os, sys, time
os.environ["WANDB_MODE"] = "offline"; os.environ["WANDB_SILENT"] = "true"
before = set(sys.modules)
sys.stderr.write("--init--\\n"); sys.stderr.flush()
t = time.perf_counter(); run = wandb.init(project="bench_startup", dir=sys.argv[1]); t_init = time.perf_counter() - t
sys.stderr.write("--done--\\n"); sys.stderr.flush()
t = time.perf_counter(); run.finish(); t_finish = time.perf_counter() - t
print(json.dumps({"init": t_init, "finish": t_finish, "modules": len(set(sys.modules) - before)}))
"""
# W&B's variables first: W&B reads them once, when its service starts (at init, or early in SERVICE_EARLY).
QUIET = 'import os; os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true"); '
INIT = FIT + """
import sys
wandb.init(project="bench_startup", dir=sys.argv[1]).finish()
"""
LAUNCH_FIRST = "import wandb.sdk.launch.inputs.internal; "
# As lit_otclust.__main__ does for a run that logs to W&B: the service boots in a thread while torch imports.
SERVICE_EARLY = "from lit_otclust.startup import start_wandb_service_early; start_wandb_service_early(['fit']); "
# What the collection console() no longer runs would free: the unreachable objects the imports leave (shallow sizes).
GARBAGE = OFF + FIT + """
import sys
gc.set_debug(gc.DEBUG_SAVEALL)
found = gc.collect()
print(found, sum(sys.getsizeof(o) for o in gc.garbage), len(gc.get_objects()))
"""


def wall(code: str, *args: str, importtime: bool = False) -> tuple[float, str, str]:
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", code, *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return time.perf_counter() - start, proc.stdout, proc.stderr


def imports_inside_init(stderr: str) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of the top-level imports made between the --init-- and --done-- marks."""
    inside = stderr.split("--init--", 1)[1].split("--done--", 1)[0]
    rows = []
    for line in inside.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            _, cumulative, name = line.split(":", 1)[1].split("|")
            if not name.startswith("  "):  # imported by W&B itself, not by another module of this list
                rows.append((int(cumulative) / 1e6, name.strip()))
    return sorted(rows, reverse=True)


def cli_parsing(repeats: int) -> None:
    import os

    import lightning as L
    from lightning.pytorch.cli import LightningCLI

    from lit_otclust.cli import OTClusterCLI
    from lit_otclust.system import DeepClustering

    class ParseOnly(OTClusterCLI):
        def _run_subcommand(self, subcommand: str) -> None:
            pass

    class EveryParser(ParseOnly):
        subcommands = staticmethod(LightningCLI.subcommands)

    os.environ["WANDB_MODE"] = "disabled"
    argv = ["fit", "--config", str(REPO / "configs" / "mnist_ot.yaml"), "--trainer.logger", "false"]
    times: dict[str, list[float]] = {"one parser (the CLI's)": [], "four parsers (Lightning's)": []}
    for r in range(repeats + 1):
        for name, cls in (("one parser (the CLI's)", ParseOnly), ("four parsers (Lightning's)", EveryParser)):
            start = time.perf_counter()
            cli = cls(DeepClustering, L.LightningDataModule, subclass_mode_data=True, args=argv)
            if r:  # the first round warms up
                times[name].append(time.perf_counter() - start)
            assert len(cli._subcommand_parsers) == (1 if cls is ParseOnly else 4)
    for name, values in times.items():
        print(f"{name:27s}: median {statistics.median(values):5.3f} s  ({', '.join(f'{v:.3f}' for v in values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--garbage", action="store_true", help="only count what a collection after the imports frees")
    parser.add_argument("--cli", action="store_true", help="only time the command line's parsing, one parser or four")
    args = parser.parse_args()
    if args.cli:
        cli_parsing(args.repeats)
        return
    if args.garbage:
        found, size, live = wall(GARBAGE)[1].split()
        print(f"after the fit's imports (gc off): {int(live):,} objects tracked; a collection finds {int(found):,} "
              f"unreachable, {int(size) / 2**20:.1f} MiB (shallow sizes)")
        return
    codes = {"bare imports": BARE, "fit imports": FIT, "bare, gc off": OFF + BARE, "fit, gc off": OFF + FIT,
             # What lit_otclust.cli.console() does after them: freeze what they built, with or without collecting first.
             "fit, gc off, collect + freeze": OFF + FIT + "; gc.collect(); gc.freeze()",
             "fit, gc off, freeze": OFF + FIT + "; gc.freeze()"}
    times: dict[str, list[float]] = {name: [] for name in codes}
    orders = {"Launch in init": OFF + QUIET + INIT, "Launch first": OFF + QUIET + LAUNCH_FIRST + INIT,
              "+ service early": OFF + QUIET + LAUNCH_FIRST + SERVICE_EARLY + INIT}
    order_times: dict[str, list[float]] = {name: [] for name in orders}
    init, finish, inner = [], [], []
    for r in range(args.repeats):
        for name, code in list(codes.items())[:: 1 if r % 2 == 0 else -1]:
            times[name].append(wall(code)[0])
        with tempfile.TemporaryDirectory() as tmp:
            for name, code in list(orders.items())[:: 1 if r % 2 == 0 else -1]:
                order_times[name].append(wall(code, tmp)[0])
            _, out, err = wall(WANDB, tmp, importtime=True)
        info = json.loads(out.strip().splitlines()[-1])
        init.append(info["init"])
        finish.append(info["finish"])
        inner.append(imports_inside_init(err))
    for name, values in times.items():
        print(f"{name:29s}: median {statistics.median(values):5.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    gap = statistics.median(times["fit imports"]) - statistics.median(times["bare imports"])
    print(f"fit - bare   : {gap:5.2f} s of imports")
    for side in ("bare", "fit"):
        saved = statistics.median(times[f"{side} imports"]) - statistics.median(times[f"{side}, gc off"])
        print(f"gc off saves : {saved:5.2f} s of the {side} imports")
    collect = statistics.median(times["fit, gc off, collect + freeze"]) - statistics.median(times["fit, gc off, freeze"])
    print(f"a gc.collect() before gc.freeze() costs {collect:5.2f} s")
    gap = statistics.median(times["fit, gc off"]) - statistics.median(times["bare imports"])
    print(f"fit (gc off) - bare (gc on): {gap:5.2f} s of imports")
    print(f"wandb.init   : median {statistics.median(init):5.2f} s offline (importtime on), finish "
          f"{statistics.median(finish):.2f} s")
    print("  imports W&B makes inside init (last repeat, cumulative s):")
    for seconds, module in inner[-1][:5]:
        print(f"    {seconds:5.2f}  {module}")
    print("fit imports (gc off) + wandb.init, one process:")
    for name, values in order_times.items():
        print(f"  {name:14s}: median {statistics.median(values):5.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    saved = statistics.median(order_times["Launch in init"]) - statistics.median(order_times["Launch first"])
    print(f"  importing W&B's Launch module first saves {saved:.2f} s")
    saved = statistics.median(order_times["Launch first"]) - statistics.median(order_times["+ service early"])
    print(f"  starting W&B's service in a thread before torch's import saves {saved:.2f} s more")


if __name__ == "__main__":
    main()
