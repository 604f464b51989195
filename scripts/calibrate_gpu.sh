#!/usr/bin/env bash
# Calibrate, plan and re-plan on a GPU machine (ran through on one H200, 2026-12-04; the project never needs it).
#
#   scripts/calibrate_gpu.sh [NGPU] [MODEL] [OUT]      (from the repository root; defaults: all GPUs, the bundled
#                                                       MoE, out/gpu)
#
# 1. plan-calibrate --device cuda --nproc NGPU --model MODEL: every GPU measured at once (one process each, NCCL
#    point-to-point between pairs): matmul/conv FLOP/s, memory bandwidth, per-op overhead of our runtime, NCCL
#    latency and bandwidth -> OUT/calibrated-gpu.yaml (with provenance) and the model's per-op times on one GPU
#    -> OUT/op_times.csv.
# 2. plan-solve on that profile (roofline on the measured figures) and again with --measured OUT/op_times.csv.
# 3. plan-simulate of both plans on the measured profile, side by side.
#
# What it does not do: run the plan on the GPUs.  plan-run's ranks compute on the CPU (gloo); a GPU runtime
# (tensors on cuda:<rank>, NCCL transfers) is the next step, and then `plan-run --backend nccl --report run.json`
# followed by `plan-solve --measured run.json` closes the loop exactly as on CPUs (README, "Calibration").
set -euo pipefail

BIN=${BIN:-.venv/bin}
PY=${PY:-$BIN/python}
NGPU=${1:-$("$PY" -c 'import torch; print(torch.cuda.device_count())')}
MODEL=${2:-planner/data/models/moe.onnx}
OUT=${3:-out/gpu}
export PYTHONPATH=${PYTHONPATH:-$PWD}

if [ "$NGPU" -lt 1 ]; then
    echo "error: no CUDA device visible (torch.cuda.device_count() is 0)" >&2
    exit 2
fi
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$OUT/gpus.csv" 2>/dev/null || true

"$BIN/plan-calibrate" --device cuda --nproc "$NGPU" --model "$MODEL" --out "$OUT/calibrated-gpu.yaml" \
    --op-times "$OUT/op_times.csv"
"$BIN/plan-solve" --model "$MODEL" --hw "$OUT/calibrated-gpu.yaml" --out "$OUT/plan.json" --no-pictures
"$BIN/plan-solve" --model "$MODEL" --hw "$OUT/calibrated-gpu.yaml" --measured "$OUT/op_times.csv" \
    --out "$OUT/plan-measured.json" --no-pictures
for plan in plan plan-measured; do
    echo "== $plan"
    # to a file, then its head: `| head` would close the pipe on plan-simulate, which then fails (and set -e stops)
    "$BIN/plan-simulate" --plan "$OUT/$plan.json" --hw "$OUT/calibrated-gpu.yaml" > "$OUT/$plan-simulate.txt"
    head -3 "$OUT/$plan-simulate.txt"
done
echo "wrote $OUT/calibrated-gpu.yaml, $OUT/op_times.csv, $OUT/plan.json, $OUT/plan-measured.json"
