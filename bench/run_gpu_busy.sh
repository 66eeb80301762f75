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
# Samples utilization.gpu every 100 ms into $1 in the background (pid in $smi), each line "EPOCH
# UTIL" stamped as it arrives, so a campaign's figure covers only its own window.
sample() {
  python3 -u -c '
import signal, subprocess, sys, time
p = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                      "-lms", "100"], stdout=subprocess.PIPE, text=True)
signal.signal(signal.SIGTERM, lambda *_: (p.terminate(), sys.exit(0)))
for line in p.stdout:
    print(f"{time.time():.3f} {line.strip()}", flush=True)
' >"$1" &
  smi=$!
}
# summarize UTIL START END RC DB CAMPAIGN_NAME HOW [LAST]: one line for the campaign's results
# stored since START (the campaign's name is its tag: bench/NAME.yaml), appended to
# throughput.log. The window ends at END, or with LAST=last-result at the campaign's last stored
# result (a daemon's campaign: the poll that noticed it comes up to 0.1 s later).
summarize() {
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  python3 - "$@" <<'PY' | tee -a "$OUT/throughput.log"
import sqlite3, sys
util_file, start, end, rc, db, name, how = sys.argv[1:8]
last = len(sys.argv) > 8 and sys.argv[8] == "last-result"
start, end = float(start), float(end)
query = ("select count(*), sum(r.outcome = 'pass'), max(r.created_ms) from results r "
         "join campaign_jobs cj on cj.job_key = r.job_key join campaigns c on c.id = cj.campaign_id "
         "where c.name = ? and r.created_ms >= ?")
rows = sqlite3.connect(db).execute(query, (name, int(start * 1000))).fetchone()
if last and rows[2] is not None:
    end = min(end, rows[2] / 1000)
wall = end - start
util = []
for line in open(util_file):
    parts = line.split()
    if len(parts) == 2 and start <= float(parts[0]) <= end:
        util.append(float(parts[1]))
busy = sum(util) / len(util) / 100 if util else float("nan")
print(f"mixed-length campaign ({name}, {how}): exit {rc}, {rows[0]} jobs ({rows[1]} passed) in "
      f"{wall:.1f} s = {rows[0] / wall:.2f} jobs/s; GPU busy (nvidia-smi utilization.gpu, "
      f"{len(util)} samples at 100 ms) {busy:.3f}")
PY
}
# CAMPAIGNS: the 240-job campaign and the 960-job one (bench/mixed-lengths-large.yaml).
campaigns=${CAMPAIGNS:-bench/mixed-lengths.yaml bench/mixed-lengths-large.yaml}

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
  .device/bin/nw worker --coordinator "$ep" --gpu 0 --slots "${SLOTS:-12}" --id gpu0 \
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
  for campaign in $campaigns; do
    tag=$(basename "$campaign" .yaml)
    sample "$OUT/util-daemon-$tag.txt"
    start=$(date +%s.%N)
    # --rerun: the large campaign shares its first eight trials' jobs with the small one.
    .device/bin/nw submit "$campaign" --coordinator "$ep" --rerun >>"$OUT/busy-daemon.log" 2>&1
    wait_done
    rc=$?
    summarize "$OUT/util-daemon-$tag.txt" "$start" "$(date +%s.%N)" "$rc" "$ddb" "$tag" \
      "daemon + nw worker --gpu 0 --slots, submit to last result" last-result
  done
  kill "$wpid"
  sleep 1
  kill "$cpid"
  wait 2>/dev/null
  exit 0
fi
for campaign in $campaigns; do
  tag=$(basename "$campaign" .yaml)
  db=/tmp/nw-$tag.db
  rm -f "$db"
  sample "$OUT/util-$tag.txt"
  start=$(date +%s.%N)
  timeout "${NW_TIMEOUT:-300}" .device/bin/nw run "$campaign" --db "$db" \
    --gpu-slots "${SLOTS:-12}" -q >"$OUT/$tag.log" 2>&1
  rc=$?
  summarize "$OUT/util-$tag.txt" "$start" "$(date +%s.%N)" "$rc" "$db" "$tag" \
    "nw run --gpu-slots, the whole process"
done
