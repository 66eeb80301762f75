#!/usr/bin/env bash
# GPU busy fraction of a mixed-length campaign (issue 13, docs/throughput.md): `nw run
# bench/mixed-lengths.yaml --gpu-slots SLOTS` while nvidia-smi samples utilization.gpu (the share
# of each sample period in which a kernel ran) every 100 ms; prints jobs/s and the mean busy
# fraction over the campaign's wall time (start-up included). Needs .device/bin/nw (device tool,
# carry [".device"]); run_throughput.sh calls it unless MIXED=0.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/nw-throughput}
mkdir -p "$OUT"
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
