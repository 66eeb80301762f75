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
# MODE=daemon: the same campaigns through a long-running coordinator and GPU worker (`nw
# coordinator`, `nw worker --gpu 0 --slots SLOTS`), as a team runs campaigns back to back: after a
# warm-up campaign (CUDA context, weights), each campaign's figure covers `nw submit` to its last
# result, so process start-up and shutdown are not in it.
if [ "${MODE:-run}" = daemon ]; then
  ep=tcp://127.0.0.1:5611
  ddb=/tmp/nw-busy-daemon.db
  rm -f "$ddb" "$ddb"-wal "$ddb"-shm
  .device/bin/nw coordinator --listen "$ep" --db "$ddb" >"$OUT/busy-daemon.log" 2>&1 &
  cpid=$!
  sleep 1
  .device/bin/nw worker --coordinator "$ep" --gpu 0 --slots "${SLOTS:-8}" --id gpu0 \
    >>"$OUT/busy-daemon.log" 2>&1 &
  wpid=$!
  # Jobs still queued or leased, through Python (the GPU image may lack the sqlite3 shell).
  left() { python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM jobs WHERE state IN (\"queued\",\"leased\")").fetchone()[0])' "$ddb" 2>/dev/null || echo 1; }
  wait_done() {
    local t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "${NW_TIMEOUT:-300}" ]; do
      [ "$(left)" = "0" ] && return 0
      sleep 0.1
    done
    return 1
  }
  warm=bench/.busy-warmup.yaml  # next to the campaigns: the model path is relative to the file
  sed 's/^name: .*/name: busy-warmup/; s/^trials: .*/trials: 1/; s/^seed: .*/seed: 99/' \
    bench/mixed-lengths.yaml >"$warm"
  .device/bin/nw submit "$warm" --coordinator "$ep" >>"$OUT/busy-daemon.log" 2>&1
  wait_done
  rm -f "$warm"
  for campaign in ${CAMPAIGNS:-bench/mixed-lengths.yaml bench/mixed-lengths-large.yaml}; do
    tag=$(basename "$campaign" .yaml)
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
      >"$OUT/util-daemon-$tag.txt" &
    smi=$!
    start=$(date +%s.%N)
    # --rerun: the large campaign shares its first eight trials' jobs with the small one.
    .device/bin/nw submit "$campaign" --coordinator "$ep" --rerun >>"$OUT/busy-daemon.log" 2>&1
    wait_done
    rc=$?
    end=$(date +%s.%N)
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
    python3 - "$OUT/util-daemon-$tag.txt" "$start" "$end" "$rc" "$ddb" "$tag" <<'PY' | tee -a "$OUT/throughput.log"
import sqlite3, sys
util = [float(x) for x in open(sys.argv[1]).read().split() if x.strip()]
wall = float(sys.argv[3]) - float(sys.argv[2])
rows = sqlite3.connect(sys.argv[5]).execute(
    "select count(*), sum(r.outcome = 'pass') from results r "
    "join campaign_jobs cj on cj.job_key = r.job_key join campaigns c on c.id = cj.campaign_id "
    "where c.name = ? and r.created_ms >= ?",
    (sys.argv[6], int(float(sys.argv[2]) * 1000))).fetchone()
busy = sum(util) / len(util) / 100 if util else float("nan")
print(f"mixed-length campaign ({sys.argv[6]}, daemon + nw worker --gpu 0 --slots, submit to last "
      f"result): wait exit {sys.argv[4]}, {rows[0]} jobs ({rows[1]} passed) in {wall:.1f} s = "
      f"{rows[0] / wall:.2f} jobs/s; GPU busy (nvidia-smi utilization.gpu, {len(util)} samples at "
      f"100 ms) {busy:.3f}")
PY
  done
  kill "$wpid"
  sleep 1
  kill "$cpid"
  wait 2>/dev/null
  exit 0
fi
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
