#!/usr/bin/env bash
# The GPU throughput table (docs/throughput.md) in one device call: needlework's product path
# (bench/gpu_throughput_bench, one slot, then SLOTS slots at once as `nw worker --slots` runs them)
# against HF transformers and models/train/v4.py on the same prompts.
#   bash bench/run_throughput.sh        (device tool: carry [".device"], timeout_s 600)
# Here, first: ninja -C build gpu_throughput_bench; scripts/device-pack.sh
#   build/bench/gpu_throughput_bench (with whatever else the call needs: build/cli/nw for MIXED,
#   build/tests/cuda/cuda_backend_ops_test for PERF).
# Env: LENGTHS (default 2048,8192,32768,131072,1048576), JOBS (64: several jobs a length per
# slot, as a campaign gives its slots), SLOTS (12), TORCH_MAX (32768),
# CAP (seconds per length and implementation, 40), NW_TIMEOUT (seconds per bench run, 300),
# TORCH_IMPLS (torch_baselines.py --impls: batch 1 and batch 8, "-b8", by default),
# MIXED (1: also bench/run_gpu_busy.sh, `nw run bench/mixed-lengths.yaml --gpu-slots SLOTS` under
# utilization sampling every 100 ms, the GPU-busy fraction of a mixed-length campaign; needs
# .device/bin/nw), PERF (1, when .device/bin/cuda_backend_ops_test is there: the V4-Flash-shape
# kernels in perf mode, their share of the ceiling that binds each appended to table.md by
# bench/kernel_ceilings.py).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/nw-throughput}
mkdir -p "$OUT"
P=/tmp/nw-throughput-prompts
rm -rf "$P"
B=.device/bin/gpu_throughput_bench
common=(--model models/tiny-v4 --backend cuda --lengths "${LENGTHS:-2048,8192,32768,131072,1048576}"
  --jobs "${JOBS:-64}" --time-cap "${CAP:-40}")
timeout "${NW_TIMEOUT:-300}" "$B" "${common[@]}" --export "$P" --json "$OUT/needlework.json" 2>&1 |
  tee "$OUT/throughput.log"
timeout "${NW_TIMEOUT:-300}" "$B" "${common[@]}" --slots "${SLOTS:-12}" \
  --json "$OUT/needlework-slots.json" 2>&1 | tee -a "$OUT/throughput.log"
# The bf16 profile (weights, activations, KV and index q/k in bf16; the indexer on tensor cores),
# against the baselines' bf16 columns. BF16=0 skips it.
extra=()
if [ "${BF16:-1}" = 1 ]; then
  timeout "${NW_TIMEOUT:-300}" "$B" "${common[@]}" --slots "${SLOTS:-12}" --precision bf16 \
    --json "$OUT/needlework-bf16-slots.json" 2>&1 | tee -a "$OUT/throughput.log"
  extra=("$OUT/needlework-bf16-slots.json")
fi
python3 bench/torch_baselines.py --prompts "$P" --model models/tiny-v4 --out "$OUT/torch.json" \
  --impls "${TORCH_IMPLS:-hf-bf16,hf-fp32,v4-bf16,v4-fp32,hf-bf16-b8,v4-bf16-b8}" \
  --max-length "${TORCH_MAX:-32768}" --time-cap "${CAP:-40}" 2>&1 | grep -v "^\[transformers\]" |
  tee -a "$OUT/throughput.log"
python3 bench/throughput_table.py "$OUT/torch.json" "$OUT/needlework.json" \
  "$OUT/needlework-slots.json" "${extra[@]}" | tee "$OUT/table.md"
if [ "${MIXED:-1}" = 1 ]; then OUT=$OUT SLOTS=${SLOTS:-12} bash bench/run_gpu_busy.sh; fi
K=.device/bin/cuda_backend_ops_test
if [ "${PERF:-1}" = 1 ] && [ -x "$K" ]; then
  timeout 300 "$K" --perf --filter='indexer decode fp8 paged|indexer decode bf16 paged|indexer prefill bf16|topk prefill 4096|topk decode 64|topk 1 x|attn m=2048 bf16 kv, tensor cores|attn m=2048 v4 fp8 kv, tensor cores' \
    >"$OUT/perf-v4-shapes.log" 2>&1
  { echo; echo "kernels at V4-Flash shapes (cuda_backend_ops_test --perf, same call):"; echo
    python3 bench/kernel_ceilings.py "$OUT/perf-v4-shapes.log"; } | tee -a "$OUT/table.md"
elif [ "${PERF:-1}" = 1 ]; then
  echo "PERF: $K not packed; the kernel table is left out" | tee -a "$OUT/table.md"
fi
