#!/usr/bin/env bash
# Issue #14's background work in order, for a working session to start and leave running (every step is
# resumable, so the next session starts it again and it goes on where it stopped):
#   nohup bash results/run_queue_cpu.sh > queue.log 2>&1 &
# 1. CIFAR-10, 5 columns x 3 seeds x 20 epochs: first since the MNIST protocol is complete (stop 28) and its runs
#    are the shortest left. Measured 2026-11-25 (fourth session, a slower machine): 52 min a 20-epoch run with
#    three lanes, ~5 h for the 15 runs (RESULTS.md, CIFAR-10).
# 2. MNIST Figure 2 at 200 epochs, 3 seeds a point (31 runs left on 2026-11-25, ~10.5 h), in three lanes, one
#    epsilon each (disjoint runs, so no run is started twice); then its table and figure (every run done: all
#    skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
bash results/run_cifar10_protocol_cpu.sh
EPS=1 bash results/run_figure2_cpu.sh &
EPS=0.001 bash results/run_figure2_cpu.sh &
EPS=0.1 bash results/run_figure2_cpu.sh &
wait
bash results/run_figure2_cpu.sh
