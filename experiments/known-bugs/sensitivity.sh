#!/usr/bin/env bash
# The known-bug sensitivity table (docs/faults.md): for each model and each fault of
# engine/fault.h (docs/faults.md), run experiments/known-bugs/campaign.yaml with that
# fault, ask the report for a decided "lost" length, gate it against the clean run, and ask
# `nw diff` for the first diverging component. Prints a Markdown table (and writes it to
# $WORK/sensitivity.md); every command's output is kept under $WORK.
#
#   experiments/known-bugs/sensitivity.sh [MODEL_DIR ...]      (default: models/tiny-v4-indexer)
# Environment: NW (default build/cli/nw), WORK (default /tmp/nw-known-bugs), WORKERS (default
# nproc), LENGTHS (override the campaign's lengths, e.g. "1023, 2047"), TRIALS, FAULTS (a subset,
# space-separated), DIFF_LENGTH (default 2047: two prefill chunks under ragged-key-offset).
# The databases ($WORK/MODEL.db) are kept: a second run reuses every finished job (delete them
# for a fresh run). Exit 0 when every command ran (whatever the table says); non-zero when one failed to run.
set -euo pipefail
cd "$(dirname "$0")/../.."
NW=${NW:-build/cli/nw}
WORK=${WORK:-/tmp/nw-known-bugs}
WORKERS=${WORKERS:-$(nproc)}
DIFF_LENGTH=${DIFF_LENGTH:-2047}
ALL_FAULTS="pd-handoff-loses-state indexer-rope-layout ragged-key-range ragged-key-offset
partial-block-mod4 compressor-state-not-restored compressed-kv-no-rope compress-rope-base
shared-expert-no-clamp"
FAULTS=${FAULTS:-$ALL_FAULTS}
MODELS=("$@")
[ ${#MODELS[@]} -eq 0 ] && MODELS=(models/tiny-v4-indexer)
TEMPLATE=experiments/known-bugs/campaign.yaml
mkdir -p "$WORK"
TABLE=$WORK/sensitivity.md

# campaign_for MODEL NAME FAULT [SEARCH]: the template with model, name, fault (and overrides).
campaign_for() {
  local model=$1 name=$2 fault=$3 search=${4:-}
  local abs
  abs=$(cd "$model" && pwd)
  sed -e "s|^name: .*|name: $name|" -e "s|^model: .*|model: $abs|" \
    -e "s|^  fault: .*|  fault: $fault|" "$TEMPLATE" >"$WORK/$name.yaml"
  if [ -n "${LENGTHS:-}" ]; then
    sed -i "s|^  context_length: .*|  context_length: [$LENGTHS]|" "$WORK/$name.yaml"
  fi
  if [ -n "${TRIALS:-}" ]; then sed -i "s|^trials: .*|trials: $TRIALS|" "$WORK/$name.yaml"; fi
  if [ -n "$search" ]; then
    printf 'search:\n  boundary: {first_trials: 1, confidence: 0.95}\n' >>"$WORK/$name.yaml"
  fi
  echo "$WORK/$name.yaml"
}

# lost_lengths JSON: the lengths whose verdict is "lost", comma-separated ("" when none).
lost_lengths() {
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
lost = sorted({l["length"] for c in d["configs"] for l in c["lengths"] if l["verdict"] == "lost"})
print(",".join(str(x) for x in lost))' "$1"
}

# jobs_done DB CAMPAIGN: jobs of the campaign with a result.
jobs_done() {
  "$NW" --db "$1" -q query --format csv "select count(*) from campaign_jobs cj join campaigns c
    on c.id = cj.campaign_id join jobs j on j.key = cj.job_key
    where c.name = '$2' and j.state = 'done'" | tail -1
}

echo "| model | fault | retrieval boundary (lengths lost) | gate vs clean | jobs: grid / search | first divergence (\`nw diff\`, ${DIFF_LENGTH} tokens) |" >"$TABLE"
echo "| --- | --- | --- | --- | --- | --- |" >>"$TABLE"
for model in "${MODELS[@]}"; do
  m=$(basename "$model")
  db=$WORK/$m.db  # kept between runs: finished jobs are not run again (content-addressed)
  clean=kb-$m-none
  "$NW" --db "$db" -q run --workers "$WORKERS" --no-report "$(campaign_for "$model" "$clean" none)" \
    >"$WORK/$clean.run.log" 2>&1
  "$NW" --db "$db" -q baseline set --replace "kb-$m" "$clean" >/dev/null
  "$NW" --db "$db" report "$clean" --format json >"$WORK/$clean.json"
  grid_jobs=$(jobs_done "$db" "$clean")
  # The clean engine against its own baseline: the same jobs, so the gate must pass (exit 0).
  rc=0
  "$NW" --db "$db" gate --baseline "kb-$m" --candidate "$clean" >"$WORK/$clean.gate.txt" 2>&1 ||
    rc=$?
  echo "| $m | none | $(lost_lengths "$WORK/$clean.json" | sed 's/^$/none/') | exit $rc | $grid_jobs / - | - |" >>"$TABLE"
  for f in $FAULTS; do
    name=kb-$m-$f
    # nw diff (one core) runs beside the campaign (the workers).
    "$NW" diff --model "$model" --a backend=cpu-pd --b "backend=cpu-pd,fault=$f" \
      --length "$DIFF_LENGTH" --position 0 --topk 16 --trials 1 --format json \
      >"$WORK/$name.diff.json" 2>"$WORK/$name.diff.err" &
    diff_pid=$!
    "$NW" --db "$db" -q run --workers "$WORKERS" --no-report "$(campaign_for "$model" "$name" "$f")" \
      >"$WORK/$name.run.log" 2>&1
    "$NW" --db "$db" report "$name" --format json >"$WORK/$name.json"
    lost=$(lost_lengths "$WORK/$name.json")
    rc=0
    "$NW" --db "$db" gate --baseline "kb-$m" --candidate "$name" --format json \
      >"$WORK/$name.gate.json" 2>"$WORK/$name.gate.err" || rc=$?
    case $rc in
      0) gate="pass (exit 0)" ;; 1) gate="**regression (exit 1)**" ;; 2) gate="not enough evidence (exit 2)" ;;
      *) gate="exit $rc" ;;
    esac
    search="-"
    if [ -n "$lost" ]; then  # the adaptive search on the same design, in its own database
      sdb=$WORK/$m-$f-search.db
      rm -f "$sdb"
      "$NW" --db "$sdb" -q run --workers "$WORKERS" --no-report \
        "$(campaign_for "$model" "$name-search" "$f" search)" >"$WORK/$name-search.run.log" 2>&1
      search=$(jobs_done "$sdb" "$name-search")
    fi
    drc=0
    wait "$diff_pid" || drc=$?
    first=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
f = d.get("first_divergence")
if not f:
    print("none (" + d.get("verdict", "?") + ")")
else:
    where = f["component"] + ("(%d)" % f["layer"] if f.get("layer") is not None else "")
    print(where + (", " + f["band"] if f.get("band") else "") + ": %s %.3g" % (f["metric"], f["value"]))' \
      "$WORK/$name.diff.json")
    [ "$drc" -gt 1 ] && first="nw diff exit $drc"
    echo "| $m | $f | ${lost:-none} | $gate | $(jobs_done "$db" "$name") / $search | $first |" >>"$TABLE"
  done
done
cat "$TABLE"
