#!/usr/bin/env bash
# A campaign through workers that a real Slurm starts (issue 16; docs/slurm.md).
#
#   tests/slurm/slurm_campaign_test.sh NW_BINARY SOURCE_DIR
#
# Starts munged, slurmctld and slurmd (Debian's slurm-wlm and munge) as root in a temporary
# directory for this one node (no systemd), runs the coordinator as a Slurm job that writes its
# endpoint to a file, submits a small campaign on the CPU backend with the shipped tiny model,
# starts 3 workers with `nw slurm submit-workers` (CURVE keys from files), scancels one worker
# and requeues another (as preemption does) while jobs run, waits for the campaign to finish, and
# checks in SQLite that every job is done exactly once: one result, one ok attempt, nothing left
# leased or failed. Also: `nw status --coordinator` shows each worker's Slurm job and node, and
# idle workers leave by themselves.
#
# Exit 77 (ctest SKIP_RETURN_CODE) with the reason when Slurm cannot start here: not root, or a
# package missing. Every daemon and job it started is stopped on exit (trap).
set -uo pipefail

NW=${1:?usage: $0 NW_BINARY SOURCE_DIR}
SRC=${2:?usage: $0 NW_BINARY SOURCE_DIR}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; dump_logs; exit 1; }
log() { echo "[$(date +%T)] $*"; }

[ "$(id -u)" -eq 0 ] || skip "needs root to start slurmctld, slurmd and munged"
for c in munged mungekey slurmctld slurmd sbatch squeue scancel scontrol sinfo sqlite3; do
  command -v "$c" >/dev/null 2>&1 || skip "$c is missing (scripts/setup.sh installs slurmctld slurmd slurm-client munge sqlite3)"
done

T=$(mktemp -d /tmp/nw-slurm-test.XXXXXX)
chmod 755 "$T"
export SLURM_CONF=$T/slurm.conf
PIDS=()
dump_logs() {
  for f in "$T"/slurmctld.log "$T"/slurmd.log "$T"/logs/*.out "$T"/coordinator.out; do
    [ -f "$f" ] || continue
    echo "----- $f (last 40 lines)"
    tail -n 40 "$f"
  done
}
cleanup() {
  trap - EXIT INT TERM
  if [ -f "$SLURM_CONF" ] && scontrol ping >/dev/null 2>&1; then
    scancel --quiet --user=root >/dev/null 2>&1
    # Let slurmd's step daemons end the jobs before the daemons go.
    local end=$((SECONDS + 40))
    while [ -n "$(squeue -h 2>/dev/null)" ] && [ $SECONDS -lt $end ]; do sleep 0.5; done
  fi
  for pidfile in "$T"/slurmd.pid "$T"/slurmctld.pid "$T"/munged.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 1
  # Whatever is left of this test's Slurm (step daemons, jobs, daemons): every such process has
  # this test's SLURM_CONF in its environment; nothing else does.
  local e pid
  for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}; pid=${pid%/environ}
    [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
    if tr '\0' '\n' <"$e" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF"; then
      kill -9 "$pid" 2>/dev/null
    fi
  done
  if [ -z "${NW_SLURM_TEST_KEEP:-}" ]; then rm -rf "$T"; else echo "kept $T"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Waits until CMD succeeds, up to SECONDS; polls every 0.5 s.
wait_for() {
  local secs=$1 what=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@"; do
    [ $SECONDS -ge $end ] && fail "timed out after ${secs}s waiting for: $what"
    sleep 0.5
  done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---- munge ----------------------------------------------------------------------------------
mkdir -p "$T/munge" "$T/ctld" "$T/spool" "$T/logs" "$T/keys" "$T/allowed"
chmod 700 "$T/munge"
mungekey --create --keyfile="$T/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge/munge.key"
munged --force --socket="$T/munge/munge.socket" --key-file="$T/munge/munge.key" \
  --pid-file="$T/munged.pid" --log-file="$T/munged.log" --seed-file="$T/munge/seed" \
  >"$T/munged.out" 2>&1 || skip "munged does not start here: $(tail -n 3 "$T/munged.out" "$T/munged.log" 2>/dev/null)"

# ---- slurm.conf: this node, a few CPU slots -------------------------------------------------
HOST=$(hostname -s)
CPUS=$(nproc)
[ "$CPUS" -lt 4 ] && CPUS=4   # 1 coordinator + 3 workers; config_overrides lets a 2-core box say 4
MEM=$(awk '/MemTotal/ {print int($2/1024/2)}' /proc/meminfo)
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
cat >"$SLURM_CONF" <<CONF
ClusterName=nwtest
SlurmctldHost=$HOST
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge/munge.socket
StateSaveLocation=$T/ctld
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
KillWait=30
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
JobRequeue=1
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=nwtest Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF

slurmctld -D -i >"$T/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -N "$HOST" >"$T/slurmd.out" 2>&1 &
PIDS+=($!)
node_idle() { [ "$(sinfo -h -n "$HOST" -o %t 2>/dev/null)" = "idle" ]; }
end=$((SECONDS + 60))
until node_idle; do
  if [ $SECONDS -ge $end ] || ! kill -0 "${PIDS[0]}" 2>/dev/null || ! kill -0 "${PIDS[1]}" 2>/dev/null; then
    echo "--- slurmctld"; tail -n 20 "$T/slurmctld.out" "$T/slurmctld.log" 2>/dev/null
    echo "--- slurmd"; tail -n 20 "$T/slurmd.out" "$T/slurmd.log" 2>/dev/null
    skip "slurmctld/slurmd do not come up on this machine (logs above)"
  fi
  sleep 0.5
done
log "slurm up: node $HOST, $CPUS CPUs, partition nwtest"

# ---- keys, coordinator as a Slurm job --------------------------------------------------------
(cd "$T/keys" && "$NW" keygen coordinator >/dev/null && "$NW" keygen workers >/dev/null &&
  "$NW" keygen alice >/dev/null) || fail "nw keygen"
cp "$T/keys/workers.pub" "$T/keys/alice.pub" "$T/allowed/"
DB=$T/campaign.db
EPFILE=$T/coordinator.endpoint
cat >"$T/coordinator.sbatch" <<JOB
#!/bin/bash
#SBATCH --job-name=nw-coordinator
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --output=$T/coordinator.out
exec "$NW" --db "$DB" coordinator --listen 'tcp://*:0' --endpoint-file "$EPFILE" \
  --curve-key "$T/keys/coordinator.key" --allow "$T/allowed" --retry-backoff-ms 200
JOB
COORD_JOB=$(sbatch --parsable "$T/coordinator.sbatch") || fail "sbatch of the coordinator"
wait_for 60 "the coordinator's endpoint file" test -s "$EPFILE"
EP=$(cat "$EPFILE")
log "coordinator: Slurm job $COORD_JOB at $EP"
CLIENT=(--coordinator "$EP" --server-key "$T/keys/coordinator.pub" --curve-key "$T/keys/alice.key")

# ---- the campaign: 256 and 512 tokens on the CPU backend, tiny-v4 ----------------------------
cat >"$T/slurm-smoke.yaml" <<YAML
name: slurm-smoke
model: $SRC/models/tiny-v4
task: niah-single
haystack: noise
matrix:
  context_length: [256, 384, 512]
  needle_position: [0.0, 0.25, 0.5, 0.75, 1.0]
  topk: 64
  precision: fp32
  backend: cpu
trials: ${NW_SLURM_TEST_TRIALS:-6}
seed: 0
generation: {max_new_tokens: 8}
YAML
"$NW" submit "$T/slurm-smoke.yaml" "${CLIENT[@]}" >"$T/submit.out" 2>&1 ||
  fail "nw submit: $(cat "$T/submit.out")"
TOTAL=$(sqlite3 -cmd ".timeout 10000" "$DB" "SELECT COUNT(*) FROM campaign_jobs cj JOIN campaigns c ON c.id = cj.campaign_id WHERE c.name = 'slurm-smoke'")
log "campaign slurm-smoke: $TOTAL jobs"
[ "$TOTAL" -gt 0 ] || fail "the campaign has no jobs"

# ---- workers: a job array of 3 through nw slurm submit-workers -------------------------------
WJOB=$("$NW" slurm submit-workers --workers 3 --coordinator-file "$EPFILE" \
  --server-key "$T/keys/coordinator.pub" --curve-key "$T/keys/workers.key" \
  --cpus-per-worker 1 --idle-exit-s 8 --drain-s 20 --signal-grace-s 60 --time 10:00 \
  --dir "$T/logs" 2>"$T/submit-workers.err") || fail "nw slurm submit-workers: $(cat "$T/submit-workers.err")"
log "workers: Slurm job array $WJOB"

done_count() {
  sqlite3 -cmd ".timeout 10000" "$DB" "SELECT COUNT(*) FROM jobs j JOIN campaign_jobs cj ON cj.job_key = j.key JOIN campaigns c ON c.id = cj.campaign_id WHERE c.name = 'slurm-smoke' AND j.state = 'done'" 2>/dev/null || echo 0
}
running_workers() { [ "$(squeue -h -j "$WJOB" -t RUNNING 2>/dev/null | wc -l)" -ge "$1" ]; }
some_done() { [ "$(done_count)" -ge "$1" ]; }
wait_for 90 "3 workers running" running_workers 3
wait_for 120 "the first results" some_done 3

# nw status shows the Slurm job and node of each worker.
status_shows_slurm() {
  "$NW" status "${CLIENT[@]}" >"$T/status.out" 2>&1 && grep -q "slurm job ${WJOB}_" "$T/status.out"
}
wait_for 30 "nw status naming the workers' Slurm jobs" status_shows_slurm
grep -q "on $HOST" "$T/status.out" || fail "nw status does not name the node: $(cat "$T/status.out")"
log "nw status --coordinator:"; sed 's/^/    /' "$T/status.out"

# ---- scancel one worker, requeue another (preemption), while the campaign runs --------------
log "scancel ${WJOB}_0 at $(done_count)/$TOTAL done"
scancel "${WJOB}_0" || fail "scancel ${WJOB}_0"
some_done_more() { [ "$(done_count)" -ge "$1" ]; }
# Three more results, or the rest of the campaign when fewer are left: a slow build (the ASan
# nw takes over a minute for the `nw status` above) can reach this point near the campaign's end,
# and waiting for results that cannot come would fail a correct run. The checks at the end
# (every job done exactly once, the cancelled worker drained) hold either way.
more=$(( $(done_count) + 3 ))
if [ "$more" -gt "$TOTAL" ]; then
  log "only $(( TOTAL - $(done_count) )) jobs were left at the scancel (raise NW_SLURM_TEST_TRIALS to cancel mid-campaign on this machine)"
  more=$TOTAL
fi
wait_for 120 "more results after the scancel" some_done_more "$more"
log "scontrol requeue ${WJOB}_1 at $(done_count)/$TOTAL done"
scontrol requeue "${WJOB}_1" || fail "scontrol requeue ${WJOB}_1"

all_done() { [ "$(done_count)" -eq "$TOTAL" ]; }
wait_for 150 "all $TOTAL jobs done" all_done
log "campaign finished: $(done_count)/$TOTAL"

# Slurm requeued element 1 (it waits in the queue for Slurm's requeue delay, or has started
# again as a new worker). Cancel it so the check below does not depend on that delay.
log "squeue: $(squeue -h -j "$WJOB" -o '%i %T %r' 2>/dev/null | tr '\n' ';')"
scontrol show job "${WJOB}_1" 2>/dev/null | grep -q "Restarts=1" ||
  fail "Slurm did not requeue ${WJOB}_1: $(scontrol show job "${WJOB}_1" 2>&1 | head -n 5)"
scancel "${WJOB}_1" 2>/dev/null
# The remaining worker leaves by itself (--idle-exit-s 8): nothing of the array keeps running.
no_workers_running() { [ "$(squeue -h -j "$WJOB" -t RUNNING,COMPLETING 2>/dev/null | wc -l)" -eq 0 ]; }
wait_for 120 "the idle workers to leave" no_workers_running
grep -q "idle, left" "$T"/logs/*_2.out || fail "worker ${WJOB}_2 did not leave as idle"

# ---- exactly once ----------------------------------------------------------------------------
q() { sqlite3 -cmd ".timeout 10000" "$DB" "$1"; }
CJ="SELECT cj.job_key FROM campaign_jobs cj JOIN campaigns c ON c.id = cj.campaign_id WHERE c.name = 'slurm-smoke'"
results=$(q "SELECT COUNT(*) FROM results WHERE job_key IN ($CJ)")
multi=$(q "SELECT COUNT(*) FROM (SELECT job_key FROM results WHERE job_key IN ($CJ) GROUP BY job_key HAVING COUNT(*) <> 1)")
ok_not_one=$(q "SELECT COUNT(*) FROM (SELECT j.key FROM jobs j LEFT JOIN attempts a ON a.job_key = j.key AND a.status = 'ok' WHERE j.key IN ($CJ) GROUP BY j.key HAVING COUNT(a.job_key) <> 1)")
not_done=$(q "SELECT COUNT(*) FROM jobs WHERE key IN ($CJ) AND state <> 'done'")
running=$(q "SELECT COUNT(*) FROM attempts WHERE job_key IN ($CJ) AND status = 'running'")
handed=$(q "SELECT COUNT(*) FROM attempts WHERE job_key IN ($CJ) AND status <> 'ok'")
log "results $results/$TOTAL, jobs with other than one result $multi, with other than one ok attempt $ok_not_one, not done $not_done, attempts still running $running, attempts not ok (handed back or lost) $handed"
[ "$results" -eq "$TOTAL" ] || fail "$results results for $TOTAL jobs"
[ "$multi" -eq 0 ] || fail "$multi jobs have more than one result"
[ "$ok_not_one" -eq 0 ] || fail "$ok_not_one jobs do not have exactly one ok attempt"
[ "$not_done" -eq 0 ] || fail "$not_done jobs are not done"
[ "$running" -eq 0 ] || fail "$running attempts still running"

# The scancelled and the requeued worker drained (their logs say so) and did not lose anything.
grep -q "draining" "$T"/logs/*_0.out || fail "worker ${WJOB}_0 did not drain on scancel"
grep -q "draining" "$T"/logs/*_1.out || fail "worker ${WJOB}_1 did not drain on requeue"
log "PASS"
exit 0
