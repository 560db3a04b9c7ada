#!/usr/bin/env bash
# Issue #12, known non-uniform cluster sizes, on a 40-epoch proxy (no pre-training), seeds 0-4.
# Data: (a) two MNIST digits, 1 (20%) and 2 (80%), the paper's Sec. 5 example: all 70k images
#           subsampled to those proportions (the 2s kept whole: ~8.7k images, 2 clusters);
#       (b) all 10 digits, long-tailed: geometric_proportions(10, 10.0), largest/smallest = 10
#           (~28k images: 6,903 of class 0 down to 690 of class 9).
# Methods, each on both sets:
#   soft k-means (w plays no part);  OT with a uniform w;  unbalanced OT (reg_m = 0.2) with a uniform w;
#   OT with the true w, the k-means centers matched to w by size (phases.match_proportions=sizes)
#   and in k-means' own order (none);  OT with a misspecified w (matched by size).
# One folder per (data set, w): run names carry only the grid's settings, so runs that differ in
# model.proportions (a --set) must not share a folder. Read them with (the tables' paper columns are
# Table 1's, on balanced MNIST: not comparable here)
#   python -m lit_otclust.experiments table --out results/imbalanced/two_digits/true_w
#   python -m lit_otclust.experiments compare --a results/imbalanced/two_digits/true_w:mnist_ot:match_proportions=sizes \
#       --b results/imbalanced/two_digits/uniform_w:mnist_ot
# 2 data sets x 6 methods x 5 seeds = 60 runs. The time per run was not measured yet (full MNIST
# took 10-13 s an epoch with two runs sharing the 2 cores; these sets are ~1/8 and ~2/5 of it).
# Two lanes of one run each (2 cores); rerunning skips finished runs and resumes interrupted ones.
set -euo pipefail
set -f  # no globbing: the [..] of the list values below are not file patterns
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
OUT=results/imbalanced
RUN="python -m lit_otclust.experiments run --seeds 0 1 2 3 4 --jobs 1 --threads 1"
SET="trainer.max_epochs=40 data.init_args.data_dir=$DATA"

# The proportions, printed by `python results/imbalanced_props.py` (4 decimals, the largest
# entry taking 1 minus the others). *_OFF: the true w with class k scaled by 1.3 (k even) or 0.7
# (k odd), renormalised; on the 10-class set this also swaps the ranks of neighbouring classes.
W2=[0.2,0.8]
W2_OFF=[0.3171,0.6829]
W10=[0.2447,0.1894,0.1467,0.1136,0.0879,0.0681,0.0527,0.0408,0.0316,0.0245]
W10_OFF=[0.3064,0.1277,0.1837,0.0766,0.1101,0.0459,0.066,0.0275,0.0396,0.0165]
TWO="data.init_args.classes=[1,2] data.init_args.class_proportions=$W2"
TEN="data.init_args.class_proportions=$W10"

# $1: folder, $2: data settings, $3: true w, $4: misspecified w, $5: which methods (the lanes' split):
# u soft k-means and OT, uniform w; r unbalanced OT, uniform w; t OT, true w, matched and not; m OT, misspecified w.
methods() {
    [[ $5 != *u* ]] || $RUN --out $1/uniform_w --configs mnist_soft_kmeans mnist_ot --set $2 $SET
    [[ $5 != *r* ]] || $RUN --out $1/uniform_w --configs mnist_ot --grid model.reg_m=0.2 --set $2 $SET
    [[ $5 != *t* ]] || $RUN --out $1/true_w --configs mnist_ot --grid phases.match_proportions=sizes,none \
        --set model.proportions=$3 $2 $SET
    [[ $5 != *m* ]] || $RUN --out $1/misspecified_w --configs mnist_ot --set model.proportions=$4 $2 $SET
}
# A two-digit run is ~1/3 of a 10-class run: lane 1 takes all of them and 2 methods of (b), lane 2 the other 4.
(   methods $OUT/two_digits "$TWO" $W2 $W2_OFF urtm
    methods $OUT/geometric10 "$TEN" $W10 $W10_OFF u ) &
(   methods $OUT/geometric10 "$TEN" $W10 $W10_OFF rtm ) &
wait
for set in two_digits geometric10; do
    for w in uniform_w true_w misspecified_w; do
        python -m lit_otclust.experiments table --out $OUT/$set/$w --baselines ""
    done
    # Paired by seed: matched true w against uniform w, soft k-means and unmatched true w; the cost of
    # a misspecified w; unbalanced against balanced OT with a uniform w.
    A=$OUT/$set/true_w:mnist_ot:match_proportions=sizes
    for b in uniform_w:mnist_ot uniform_w:mnist_soft_kmeans true_w:mnist_ot:match_proportions=none; do
        python -m lit_otclust.experiments compare --a $A --b $OUT/$set/$b
    done
    python -m lit_otclust.experiments compare --a $OUT/$set/misspecified_w:mnist_ot --b $A
    python -m lit_otclust.experiments compare --a $OUT/$set/uniform_w:mnist_ot:reg_m=0.2 --b $OUT/$set/uniform_w:mnist_ot
done
