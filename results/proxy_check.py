"""Is the 40-epoch proxy predictive? Accuracy at epoch 40 against the end of longer runs of the same command.

    python results/proxy_check.py [--records results/long_lambda] [--at 39] [--proxy results/study_recipe] > results/proxy_check.txt

For every from-scratch run in ``--records`` with the config's own settings (the (p) runs are left out, their epoch
40 being pre-training, and so are a sweep's runs with grid settings, e.g. Figure 2's other epsilons), the
val/acc after epoch ``--at`` (0-based, so 39 = the proxy's last epoch) and at the run's last epoch; the
Spearman rank correlation over runs (scipy); per method, the means at both epochs; and by seed, OT minus
soft k-means at both, the comparison the recipe study makes on the proxy. With ``--proxy``, the same config
and seed run for ``--at + 1`` epochs in that folder (no grid settings) against the longer run at epoch ``--at``:
the same command line up to its length. A difference is the runs' non-determinism or a change of the code
between them (each record's ``commit`` names its code; records written before that field have none).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from scipy.stats import spearmanr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="results/long_lambda")
    parser.add_argument("--at", type=int, default=39)
    parser.add_argument("--proxy", default="results/study_recipe")
    args = parser.parse_args()
    runs = [json.loads(p.read_text()) for p in sorted(Path(args.records).glob("*.json"))]
    runs = [r for r in runs if not r["config"].endswith("_p") and not r.get("grid") and str(args.at) in r["curves"]]
    rows = []
    for r in runs:
        last = max(r["curves"], key=int)
        rows.append((r["config"], r["seed"], r["curves"][str(args.at)]["val/acc"], r["curves"][last]["val/acc"], int(last)))
    print(f"{args.records}: val/acc after epoch {args.at} (0-based) and at the run's last epoch\n")
    print("| config | seed | proxy (epoch %d) | last epoch | last |" % args.at)
    print("|---|---|---|---|---|")
    for config, seed, proxy, final, last in rows:
        print(f"| {config} | {seed} | {proxy:.3f} | {last} | {final:.3f} |")
    rho, p = spearmanr([r[2] for r in rows], [r[3] for r in rows])
    print(f"\nSpearman rank correlation over the {len(rows)} runs: {rho:.2f} (p = {p:.2g})\n")
    print("| config | runs | mean at the proxy | mean at the last epoch |")
    print("|---|---|---|---|")
    for config in sorted({r[0] for r in rows}):
        sel = [r for r in rows if r[0] == config]
        print(f"| {config} | {len(sel)} | {statistics.mean(r[2] for r in sel):.3f} | {statistics.mean(r[3] for r in sel):.3f} |")
    by = {(r[0], r[1]): r for r in rows}
    seeds = sorted({s for c, s in by if c == "mnist_ot" and ("mnist_soft_kmeans", s) in by})
    if seeds:
        print("\nOT minus soft k-means, by seed (the recipe study's comparison):\n")
        print("| seed | at the proxy | at the last epoch |")
        print("|---|---|---|")
        for s in seeds:
            ot, skm = by[("mnist_ot", s)], by[("mnist_soft_kmeans", s)]
            print(f"| {s} | {ot[2] - skm[2]:+.3f} | {ot[3] - skm[3]:+.3f} |")
    if args.proxy:
        print(f"\nThe same config and seed in {args.proxy} (its last epoch) against epoch {args.at} above:\n")
        print("| config | seed | short run | long run at the same epoch | difference |")
        print("|---|---|---|---|---|")
        for config, seed, proxy, _, _ in rows:
            path = Path(args.proxy) / f"{config}__seed={seed}.json"
            if path.exists():
                short = json.loads(path.read_text())
                if max(map(int, short["curves"])) == args.at:
                    acc = short["final"]["val/acc"]
                    print(f"| {config} | {seed} | {acc:.4f} | {proxy:.4f} | {acc - proxy:+.4f} |")


if __name__ == "__main__":
    main()
