#!/usr/bin/env bash
# Second H200 stage of models/tiny-v4: continue the first run (run_device.sh) on data weighted
# towards the cases it missed. The first run found single and repeated needles but, with
# distractors present (niah-multikey, and niah-single in the `needles` haystack), usually
# returned a wrong needle's value: it had learnt to find "a needle", not the asked key.
#   1. shards from `nw data niah`, per length octave: niah-multikey over all haystacks (about
#      half the tokens), niah-single in the needles haystack (a quarter), the full mix (a
#      quarter); seeds 2000..2029; held-out eval sets as in run_device.sh (seed 900000+L);
#   2. train.py --init FIRST_RUN for TRAIN_SECONDS (seed 1, lr 1e-3, dense then sparse);
#   3. plot.py over both runs' logs, golden.py, eval.py, as run_device.sh.
#
#   models/train/run_device_continue.sh FIRST_RUN_DIR TRAIN_SECONDS [EVAL_LENGTHS] [EVAL_COUNT]
# FIRST_RUN_DIR holds the first run's model.safetensors and train_log.jsonl.
set -euo pipefail
FIRST=${1:?first run folder}
TRAIN_SECONDS=${2:?training seconds}
EVAL_LENGTHS=${3:-512,1024,2048,4096,8192,16000}
EVAL_COUNT=${4:-100}
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
NW=$PWD/.device/bin/nw
TOK=models/tiny-v4/tokenizer.json
W=/tmp/nwtrain2
rm -rf "$W" && mkdir -p "$W/data" "$W/eval" "$W/model"
T0=$(date +%s)

shard() {  # name count min max seed tasks haystacks
  "$NW" data niah --tokenizer "$TOK" --out "$W/data/$1" --count "$2" --min-len "$3" \
    --max-len "$4" --seed "$5" --tasks $6 --haystacks $7 && touch "$W/data/$1.done"
}
octaves="0:256:511:16000 1:512:1023:8000 2:1024:2047:4000 3:2048:4095:2000 4:4096:8192:1000"
i=0
for rep in 0 1; do
  for o in $octaves; do
    IFS=: read -r k lo hi n <<<"$o"
    shard "o${k}_mk_$rep" "$n" "$lo" "$hi" $((2000 + i)) niah-multikey "noise essay needles" &
    shard "o${k}_sn_$rep" $((n / 2)) "$lo" "$hi" $((2001 + i)) niah-single needles &
    shard "o${k}_all_$rep" $((n / 2)) "$lo" "$hi" $((2002 + i)) \
      "niah-single niah-multikey niah-repeat" "noise essay needles" &
    i=$((i + 3))
  done
  wait
done &
for L in ${EVAL_LENGTHS//,/ }; do
  "$NW" data niah --tokenizer "$TOK" --out "$W/eval/len_$L" --count "$EVAL_COUNT" \
    --min-len "$L" --max-len "$L" --seed $((900000 + L)) &
done

python3 models/train/train.py --config models/tiny-v4/config.json --data "$W/data/o*" \
  --out "$W/run" --time-budget "$TRAIN_SECONDS" --seed 1 --init "$FIRST/model.safetensors" \
  --lr 1e-3 --warmup 50 --curriculum 0.35:2048,1.01:8193 --sparse-from 0.5 2>&1 |
  tee "$W/train.log"
wait
cp models/tiny-v4/config.json models/tiny-v4/tokenizer.json "$W/run/model.safetensors" "$W/model/"

cp "$W/run/model.safetensors" "$W/run/train_log.jsonl" "$OUT/"
python3 models/train/plot.py --log "$FIRST/train_log.jsonl" --log "$W/run/train_log.jsonl" \
  --out "$OUT/loss.png"
python3 models/train/golden.py --model "$W/model" --prompts tests/data/golden/prompts.json \
  --out "$OUT/tiny-v4.json" --label "models/tiny-v4 (trained, BF16 weights)"
python3 models/train/eval.py --model "$W/model" --data "$W/eval" --lengths "$EVAL_LENGTHS" \
  --topk dense,64,32,16 --out "$OUT/eval.json" 2>&1 | tee "$W/eval.log"
python3 -c '
import json, sys
w, out = sys.argv[1], sys.argv[2]
s = json.load(open(w + "/run/summary.json"))
s["train_log_tail"] = open(w + "/train.log").read()[-3000:]
s["eval_log"] = open(w + "/eval.log").read()
json.dump(s, open(out, "w"), indent=1)
' "$W" "$OUT/run_summary.json"
echo "device script wall time: $(( $(date +%s) - T0 )) s"
