#!/usr/bin/env bash
# The GPU throughput table (docs/throughput.md) in one device call: needlework's product path
# (bench/gpu_throughput_bench) against HF transformers and models/train/v4.py on the same prompts.
#   bash bench/run_throughput.sh        (device tool: carry [".device"], timeout_s 600)
# Here, first: ninja -C build gpu_throughput_bench nw; ../shared/tools/device-pack
#   build/bench/gpu_throughput_bench (and whatever else the call needs).
# Env: LENGTHS (default 2048,8192,32768,131072,1048576), JOBS (16), TORCH_MAX (32768), CAP (40).
set -euo pipefail
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/nw-throughput}
mkdir -p "$OUT"
P=/tmp/nw-throughput-prompts
rm -rf "$P"
timeout "${NW_TIMEOUT:-300}" .device/bin/gpu_throughput_bench --model models/tiny-v4 --backend cuda \
  --lengths "${LENGTHS:-2048,8192,32768,131072,1048576}" --jobs "${JOBS:-16}" \
  --time-cap "${CAP:-40}" --export "$P" --json "$OUT/needlework.json" 2>&1 | tee "$OUT/throughput.log" || true
python3 bench/torch_baselines.py --prompts "$P" --model models/tiny-v4 --out "$OUT/torch.json" \
  --max-length "${TORCH_MAX:-32768}" --time-cap "${CAP:-40}" 2>&1 | grep -v "^\[transformers\]" |
  tee -a "$OUT/throughput.log"
python3 bench/throughput_table.py "$OUT/needlework.json" "$OUT/torch.json" | tee "$OUT/table.md"
