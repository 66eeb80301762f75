#!/usr/bin/env bash
# GPU busy fraction of mixed-length campaigns (issue 13, docs/throughput.md): `nw run CAMPAIGN
# --gpu-slots SLOTS` while nvidia-smi samples utilization.gpu (the share of each sample period in
# which a kernel ran) every 100 ms; prints jobs/s and the mean busy fraction over each campaign's
# wall time (start-up and shutdown included), for bench/mixed-lengths.yaml (240 jobs) and
# bench/mixed-lengths-large.yaml (960 jobs). Needs .device/bin/nw (device tool,
# carry [".device"]); run_throughput.sh calls it unless MIXED=0.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/nw-throughput}
mkdir -p "$OUT"
# CAMPAIGNS: the 240-job campaign and the 960-job one (bench/mixed-lengths-large.yaml).
for campaign in ${CAMPAIGNS:-bench/mixed-lengths.yaml bench/mixed-lengths-large.yaml}; do
  tag=$(basename "$campaign" .yaml)
  db=/tmp/nw-$tag.db
  rm -f "$db"
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 >"$OUT/util-$tag.txt" &
  smi=$!
  start=$(date +%s.%N)
  timeout "${NW_TIMEOUT:-300}" .device/bin/nw run "$campaign" --db "$db" \
    --gpu-slots "${SLOTS:-8}" -q >"$OUT/$tag.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  python3 - "$OUT/util-$tag.txt" "$start" "$end" "$rc" "$db" "$campaign" <<'PY' | tee -a "$OUT/throughput.log"
import sqlite3, sys
util = [float(x) for x in open(sys.argv[1]).read().split() if x.strip()]
wall = float(sys.argv[3]) - float(sys.argv[2])
rows = sqlite3.connect(sys.argv[5]).execute(
  "select count(*), sum(outcome = 'pass') from results").fetchone()
busy = sum(util) / len(util) / 100 if util else float("nan")
print(f"mixed-length campaign ({sys.argv[6]}, nw run --gpu-slots): exit {sys.argv[4]}, "
    f"{rows[0]} jobs ({rows[1]} passed) in {wall:.1f} s = {rows[0] / wall:.2f} jobs/s; "
    f"GPU busy (nvidia-smi utilization.gpu, {len(util)} samples at 100 ms) {busy:.3f}")
PY
done
