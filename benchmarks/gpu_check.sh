#!/usr/bin/env bash
# The checks to run whenever a CUDA GPU is lent, everything printed to stdout:
#
#     bash benchmarks/gpu_check.sh [--cpu] [--dry-run] [--data-dir DIR] [STAGE ...]
#
# Stages (default: all four, in this order; about 10 minutes in all on an H100 without `concurrent`, ~5 more with it,
# so on a short lease run `tests step fit`, then `concurrent`):
#   tests       tests/test_cuda.py (the Sinkhorn and its gradient against the CPU's, NCCL, a fit with the data on the
#               device that draws and predicts);
#   step        one training step (fixed solve) eager against torch.compile'd, modes default and reduce-overhead
#               (benchmarks/bench_compile.py);
#   fit         `fit --config configs/mnist_ot.yaml`, data on the device, fixed solve with 10 iterations, eager and with
#               each --model.compile mode, on 5 and 20 epochs, against the bare PyTorch loop on the GPU: the marginal
#               epoch, the fixed cost, the 200-epoch projection, the fit over the bare loop (benchmarks/bench_fit.py);
#   concurrent  N = 1, 2, 4, 8 such 20-epoch fits at once on the one GPU: runs per hour, and 200-epoch runs per hour
#               projected (the goal: 50 runs of 200 epochs within an hour on one H100);
#   estimator   OTClustering(proportions=w) on 10^6 and 10^7 20-d rows on the GPU, beside MiniBatchKMeans and faiss
#               on the CPU's cores (benchmarks/bench_estimator.py; goal: 10^7 rows within a minute); by name only.
# --cpu: the same on the CPU, small (2,000 images, 1 and 2 epochs, N = 1, 2, eager and default only, one thread a
# process), to check the script where no GPU is (tests/test_benchmarks.py). --dry-run: print the commands, run nothing.
# Settings from the environment: EPOCHS ("5 20"), CONCURRENT ("1 2 4 8"), COMPILE (the fit stage's modes, "false
# default reduce-overhead"), CONCURRENT_COMPILE (the concurrent fits' mode, "false").
set -uo pipefail
exec 2>&1
cd "$(dirname "$0")/.."
DATA=../shared/data CPU=0 DRY=0 STAGES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) CPU=1 ;;
        --dry-run) DRY=1 ;;
        --data-dir) DATA=$2; shift ;;
        tests|step|fit|concurrent|estimator) STAGES+=("$1") ;;
        *) echo "unknown argument: $1"; exit 2 ;;
    esac
    shift
done
[ ${#STAGES[@]} -eq 0 ] && STAGES=(tests step fit concurrent)
export WANDB_MODE=${WANDB_MODE:-offline} WANDB_SILENT=true PYTHONUNBUFFERED=1
if [ "$CPU" -eq 1 ]; then
    DEVICE=cpu PLACE=(--trainer.accelerator cpu --data.init_args.subset 2000 --threads 1)
    EPOCHS=${EPOCHS:-1 2} CONCURRENT=${CONCURRENT:-1 2} COMPILE=${COMPILE:-false default} STEP=(--steps 2 --rounds 1)
    BARE=()  # the bare loop fits all 70k images: too long for the CPU check
else
    DEVICE=cuda PLACE=(--trainer.accelerator gpu --trainer.devices 1 --data.init_args.on_device true
                       --data.init_args.num_workers 0)
    EPOCHS=${EPOCHS:-5 20} CONCURRENT=${CONCURRENT:-1 2 4 8} COMPILE=${COMPILE:-false default reduce-overhead}
    STEP=(--steps 50 --rounds 5) BARE=(--bare fixed --bare-device cuda)
fi
FIXED=(--model.loss.init_args.solver fixed --model.loss.init_args.iters 10)
failed=()
run() {  # run NAME CMD...: print and run one command; a failure is reported at the end, the next stage still runs
    local name=$1; shift
    echo; echo "== $name: $(printf '%q ' "$@")"
    [ "$DRY" -eq 1 ] && return 0
    "$@" || failed+=("$name (rc $?)")
}

if [ "$DRY" -eq 0 ]; then
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python -c "import os, torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU', 'cpu cores', os.cpu_count())"
fi
for stage in "${STAGES[@]}"; do
    case $stage in
        tests) run tests env LIT_OTCLUST_DATA="$DATA" python -m pytest -q -rs -p no:cacheprovider tests/test_cuda.py ;;
        step)
            run step_default python -m benchmarks.bench_compile --device $DEVICE --mode default "${STEP[@]}"
            [ "$CPU" -eq 0 ] && run step_reduce_overhead python -m benchmarks.bench_compile --device $DEVICE \
                --mode reduce-overhead --variants eager both "${STEP[@]}" ;;
        fit)
            variants=()
            for mode in $COMPILE; do variants+=(--variant "compile=$mode" "--model.compile $mode"); done
            # shellcheck disable=SC2086  # EPOCHS is a list
            run fit python -m benchmarks.bench_fit --data-dir "$DATA" --epochs $EPOCHS --rounds 1 "${variants[@]}" \
                "${BARE[@]}" "${FIXED[@]}" "${PLACE[@]}" ;;
        concurrent)
            # shellcheck disable=SC2086
            run concurrent python -m benchmarks.bench_fit --data-dir "$DATA" --epochs $EPOCHS --rounds 1 \
                --variant "compile=${CONCURRENT_COMPILE:-false}" "--model.compile ${CONCURRENT_COMPILE:-false}" \
                --concurrent $CONCURRENT "${FIXED[@]}" "${PLACE[@]}" ;;
        estimator)
            N=$([ "$CPU" -eq 1 ] && echo "2000 4000" || echo "1000000 10000000")
            # shellcheck disable=SC2086
            run estimator python -m benchmarks.bench_estimator --n $N --rounds 1 --threads "$(nproc)" \
                --only estimator minibatch faiss ;;
    esac
done
echo
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "gpu_check: all stages ran"
