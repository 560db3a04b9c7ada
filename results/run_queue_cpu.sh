#!/usr/bin/env bash
# Issue #14's background work, for a working session to start and leave running (every step is resumable, so the
# next session starts it again and it goes on where it stopped):
#   nohup bash results/run_queue_cpu.sh > queue.log 2>&1 &
# - CIFAR-10, 5 columns x 3 seeds x 20 epochs (results/run_cifar10_protocol_cpu.sh): complete on 2026-11-26 (every
#   run skipped).
# - MNIST Figure 2 at 200 epochs, 3 seeds a point (15 runs left at 07:30 of 2026-11-26's third session), three lanes, one epsilon each
#   (disjoint runs, so no run is started twice); then its table and figure (every run done: all skipped).
# - When CIFAR-10's protocol lane ends, the same lane measures MNIST's loss weight on CIFAR-10
#   (results/run_cifar10_lambda_cpu.sh: OT, lambda = 1/300, 20 epochs, seeds 0-2), then runs the ninth round of the
#   recipe study (results/run_anneal_cpu.sh: OT with epsilon annealed over its first 20 epochs, 200 epochs, seeds 0-2),
#   both complete on 2026-11-26; then whether bfloat16 mixed precision moves accuracy (results/run_bf16_cpu.sh: OT,
#   40 epochs, seeds 0-2, float32 and bf16-mixed; started in 2026-11-26's third session).
# All at once: four 1-thread lanes on the 2 cores, so that no core idles.
set -euo pipefail
cd "$(dirname "$0")/.."
( bash results/run_cifar10_protocol_cpu.sh; bash results/run_cifar10_lambda_cpu.sh; bash results/run_anneal_cpu.sh
  bash results/run_bf16_cpu.sh ) &
EPS=1 bash results/run_figure2_cpu.sh &
EPS=0.001 bash results/run_figure2_cpu.sh &
EPS=0.1 bash results/run_figure2_cpu.sh &
wait
bash results/run_figure2_cpu.sh
