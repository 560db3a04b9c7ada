#!/usr/bin/env bash
# Issue #12, second round: the points that make "accuracy against the imbalance ratio" a line per method
# on the 10-class family (ratio 1 = balanced MNIST, 3, 10 = results/run_imbalanced_cpu.sh), 40-epoch proxy,
# no pre-training, seeds 0-4, the same methods and settings as the first round.
# - Ratio 1: soft k-means and OT with the (uniform = true) w are results/study_recipe's mnist_soft_kmeans and
#   mnist_ot (the same command); OT with the true w matched by size is the same run, as every size matches a
#   uniform w. New here: unbalanced OT (reg_m = 0.2), written to results/study_recipe as the recipe study's
#   second round also runs it, and OT with the misspecified uniform w (W1_OFF: 0.13 / 0.07 alternately).
# - Ratio 3: geometric_proportions(10, 3.0), all six methods (~38k images).
# Proportions printed by `python results/imbalanced_props.py`. Two lanes of one run each (2 cores);
# rerunning skips finished runs and resumes interrupted ones.
set -euo pipefail
set -f  # no globbing: the [..] of the list values below are not file patterns
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
OUT=results/imbalanced
RUN="python -m lit_otclust.experiments run --seeds 0 1 2 3 4 --jobs 1 --threads 1"
SET="trainer.max_epochs=40 data.init_args.data_dir=$DATA"
W1_OFF=[0.13,0.07,0.13,0.07,0.13,0.07,0.13,0.07,0.13,0.07]
W3=[0.163,0.1443,0.1277,0.113,0.1,0.0885,0.0784,0.0694,0.0614,0.0543]
W3_OFF=[0.208,0.0992,0.163,0.0777,0.1277,0.0609,0.1,0.0477,0.0784,0.0374]
THREE="data.init_args.class_proportions=$W3"
G3=$OUT/geometric3
(   $RUN --out $OUT/balanced/misspecified_w --configs mnist_ot --set model.proportions=$W1_OFF $SET
    $RUN --out $G3/uniform_w --configs mnist_soft_kmeans mnist_ot --set $THREE $SET
    $RUN --out $G3/misspecified_w --configs mnist_ot --set model.proportions=$W3_OFF $THREE $SET ) &
(   $RUN --out results/study_recipe --configs mnist_ot --grid model.reg_m=0.2 --set trainer.max_epochs=40 data.data_dir=$DATA
    $RUN --out $G3/uniform_w --configs mnist_ot --grid model.reg_m=0.2 --set $THREE $SET
    $RUN --out $G3/true_w --configs mnist_ot --grid phases.match_proportions=sizes,none --set model.proportions=$W3 $THREE $SET ) &
wait
python -m lit_otclust.experiments table --out $OUT/balanced/misspecified_w --baselines ""
for w in uniform_w true_w misspecified_w; do
    python -m lit_otclust.experiments table --out $G3/$w --baselines ""
done
python results/imbalanced_report.py
