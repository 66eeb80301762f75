#!/usr/bin/env bash
# The known-bug sensitivity claims of docs/faults.md, on the CPU: on models/tiny-v4-indexer at
# 2,047 tokens (two 1,024-token prefill chunks), each of the four faults that cost needles is
# caught (the report's decided "lost" length, or `nw gate` exit 1 against the clean baseline) and
# `nw diff` names its first diverging component; the clean run passes its own gate (exit 0).
# Runs experiments/known-bugs/sensitivity.sh as documented, on 60 jobs.
#   tests/e2e/known_bugs_test.sh NW SOURCE_DIR
set -euo pipefail
NW=$(realpath "$1")
SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$SRC"
NW=$NW WORK=$WORK WORKERS=2 LENGTHS="2047" DIFF_LENGTH=2047 \
  FAULTS="pd-handoff-loses-state indexer-rope-layout ragged-key-offset compress-rope-base" \
  experiments/known-bugs/sensitivity.sh models/tiny-v4-indexer >"$WORK/table.md"
cat "$WORK/table.md"
fail=0
while IFS='|' read -r _ model fault lost gate jobs first _; do
  fault=$(echo "$fault" | xargs)
  case "$fault" in
    none)
      [[ "$gate" == *"exit 0"* ]] || { echo "FAIL: the clean run's own gate: $gate"; fail=1; } ;;
    pd-handoff-loses-state | indexer-rope-layout | ragged-key-offset | compress-rope-base)
      if [[ "$(echo "$lost" | xargs)" == none && "$gate" != *"exit 1"* ]]; then
        echo "FAIL: $fault: no boundary and no gate regression ($gate)"
        fail=1
      fi
      if [[ "$first" != *"indexer("* && "$first" != *"attn("* && "$first" != *"hidden("* ]]; then
        echo "FAIL: $fault: nw diff named no component: $first"
        fail=1
      fi ;;
  esac
done < <(tail -n +3 "$WORK/table.md")
rows=$(tail -n +3 "$WORK/table.md" | wc -l)
[ "$rows" -eq 5 ] || { echo "FAIL: expected 5 rows, got $rows"; fail=1; }
exit $fail
