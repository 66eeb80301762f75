#!/usr/bin/env bash
# The GPU throughput table (docs/throughput.md) in one device call: needlework's product path
# (bench/gpu_throughput_bench, one slot, then SLOTS slots at once as `nw worker --slots` runs them)
# against HF transformers and models/train/v4.py on the same prompts.
#   bash bench/run_throughput.sh        (device tool: carry [".device"], timeout_s 600)
# Here, first: ninja -C build gpu_throughput_bench; scripts/device-pack.sh
#   build/bench/gpu_throughput_bench (with whatever else the call needs).
# Env: LENGTHS (default 2048,8192,32768,131072,1048576), JOBS (16), SLOTS (8), TORCH_MAX (32768),
# CAP (seconds per length and implementation, 40), NW_TIMEOUT (seconds per bench run, 300),
# MIXED (1: also `nw run bench/mixed-lengths.yaml --gpu-slots SLOTS` under nvidia-smi's
# utilization sampling every 100 ms, the GPU-busy fraction of a mixed-length campaign; needs
# .device/bin/nw).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/nw-throughput}
mkdir -p "$OUT"
P=/tmp/nw-throughput-prompts
rm -rf "$P"
B=.device/bin/gpu_throughput_bench
common=(--model models/tiny-v4 --backend cuda --lengths "${LENGTHS:-2048,8192,32768,131072,1048576}"
  --jobs "${JOBS:-16}" --time-cap "${CAP:-40}")
timeout "${NW_TIMEOUT:-300}" "$B" "${common[@]}" --export "$P" --json "$OUT/needlework.json" 2>&1 |
  tee "$OUT/throughput.log"
timeout "${NW_TIMEOUT:-300}" "$B" "${common[@]}" --slots "${SLOTS:-8}" \
  --json "$OUT/needlework-slots.json" 2>&1 | tee -a "$OUT/throughput.log"
python3 bench/torch_baselines.py --prompts "$P" --model models/tiny-v4 --out "$OUT/torch.json" \
  --max-length "${TORCH_MAX:-32768}" --time-cap "${CAP:-40}" 2>&1 | grep -v "^\[transformers\]" |
  tee -a "$OUT/throughput.log"
python3 bench/throughput_table.py "$OUT/torch.json" "$OUT/needlework.json" \
  "$OUT/needlework-slots.json" | tee "$OUT/table.md"
if [ "${MIXED:-1}" = 1 ] && [ -x .device/bin/nw ]; then
  db=/tmp/nw-mixed.db
  rm -f "$db"
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 >"$OUT/util.txt" &
  smi=$!
  start=$(date +%s.%N)
  timeout "${NW_TIMEOUT:-300}" .device/bin/nw run bench/mixed-lengths.yaml --db "$db" \
    --gpu-slots "${SLOTS:-8}" -q >"$OUT/mixed.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  python3 - "$OUT/util.txt" "$start" "$end" "$rc" "$db" <<'PY' | tee -a "$OUT/throughput.log"
import sqlite3, sys
util = [float(x) for x in open(sys.argv[1]).read().split() if x.strip()]
wall = float(sys.argv[3]) - float(sys.argv[2])
rows = sqlite3.connect(sys.argv[5]).execute(
    "select count(*), sum(outcome = 'pass') from results").fetchone()
busy = sum(util) / len(util) / 100 if util else float("nan")
print(f"mixed-length campaign (bench/mixed-lengths.yaml, nw run --gpu-slots): exit {sys.argv[4]}, "
      f"{rows[0]} jobs ({rows[1]} passed) in {wall:.1f} s = {rows[0] / wall:.2f} jobs/s; "
      f"GPU busy (nvidia-smi utilization.gpu, {len(util)} samples at 100 ms) {busy:.3f}")
PY
fi
