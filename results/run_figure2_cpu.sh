#!/usr/bin/env bash
# Issue #14: the paper's Figure 2 (accuracy after 200 epochs against epsilon) at the full protocol, 3 seeds a point.
# epsilon = 1e-2 is the configs' own value: those points are the protocol's runs (results/run_protocol_cpu.sh, seeds
# 0-2 among them), so this script runs the other three values into the same folder, 4 methods x 3 values x 3 seeds =
# 36 runs. Three lanes, one epsilon each (disjoint runs), 12 runs a lane, seed-major so that each seed's four methods
# land together; measured 2026-11-25 with three lanes: ~55-60 min a 200-epoch run, so ~12 h of the machine, after
# the protocol. Resumable like the others. EPS="0.1" runs one lane (results/run_queue_cpu.sh starts them apart). Then:
#   python -m lit_otclust.experiments figures --out results/protocol --grid_key model.epsilon --grid_default 0.01
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
OUT=results/protocol
RUN="python -m lit_otclust.experiments run --out $OUT --jobs 1 --threads 1 --seeds 0 1 2"
CONFIGS="mnist_ot mnist_soft_kmeans mnist_ot_p mnist_soft_kmeans_p"
SET="data.data_dir=$DATA"
for eps in ${EPS:-0.001 0.1 1}; do
    $RUN --configs $CONFIGS --grid model.epsilon=$eps --set $SET &
done
wait
python -m lit_otclust.experiments table --out $OUT
python -m lit_otclust.experiments figures --out $OUT --grid_key model.epsilon --grid_default 0.01
