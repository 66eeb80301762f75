#!/usr/bin/env bash
# Continues training models/tiny-v4-indexer on one H200 (one device call): from the weights in the
# model folder, sparse throughout (the indexer's top-16 decides what the ratio-4 layers see), data
# weighted towards distractors (niah-multikey, the "needles" haystack) where the first run was weak.
# Then golden.py (v4.py, fp32), hf_reference.py (HF transformers, fp32) and eval.py (PyTorch exact
# match per length and top-k) on the result.
#
#   models/train/run_device_indexer.sh SECONDS [SEED] [LR] [EVAL_LENGTHS] [EVAL_COUNT]
# Needs: .device/bin/nw (tools/device-pack). Writes to $OUT: indexer.safetensors, then
# indexer-results.tar.gz (golden, HF reference, eval table, training log, loss curve, summary).
# The first run (from scratch, 370 s, seed 0) was models/train/run_device_round3.sh's "indexer".
set -euo pipefail
SECONDS_BUDGET=${1:?training seconds}
SEED=${2:-5}
LR=${3:-1e-3}
EVAL_LENGTHS=${4:-512,1024,2048,4096,8192,16000}
EVAL_COUNT=${5:-100}
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
NW=$PWD/.device/bin/nw
SRC=models/tiny-v4-indexer
TOK=$SRC/tokenizer.json
W=/tmp/nwtrain-indexer
rm -rf "$W" && mkdir -p "$W/data" "$W/eval" "$W/res" "$W/model"
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
cp "$SRC/config.json" "$TOK" "$W/model/"

shard() {  # name count min max seed tasks haystacks
  "$NW" data niah --tokenizer "$TOK" --out "$W/data/$1" --count "$2" --min-len "$3" \
    --max-len "$4" --seed "$5" --tasks $6 --haystacks $7 && touch "$W/data/$1.done"
}
octaves="0:256:511:16000 1:512:1023:8000 2:1024:2047:4000 3:2048:4095:2000 4:4096:8192:1000"
(
  i=0
  for rep in 0 1; do
    for o in $octaves; do
      IFS=: read -r k lo hi n <<<"$o"
      shard "o${k}_mix_$rep" "$n" "$lo" "$hi" $((5000 + SEED * 100 + i)) \
        "niah-single niah-multikey niah-repeat" "noise essay needles" &
      shard "o${k}_mk_$rep" "$n" "$lo" "$hi" $((5001 + SEED * 100 + i)) niah-multikey \
        "noise essay needles" &
      shard "o${k}_nd_$rep" $((n / 2)) "$lo" "$hi" $((5002 + SEED * 100 + i)) \
        "niah-single niah-repeat" needles &
      i=$((i + 3))
    done
    wait
  done
) &
for L in ${EVAL_LENGTHS//,/ }; do
  "$NW" data niah --tokenizer "$TOK" --out "$W/eval/len_$L" --count "$EVAL_COUNT" \
    --min-len "$L" --max-len "$L" --seed $((900000 + L)) &
done

python3 models/train/train.py --config "$W/model/config.json" --data "$W/data/o*" \
  --out "$W/indexer" --time-budget "$SECONDS_BUDGET" --seed "$SEED" \
  --init "$SRC/model.safetensors" --lr "$LR" --warmup 50 --curriculum 1.01:8193 \
  --sparse-from 0 >"$W/indexer.log" 2>&1
stamp "indexer trained"
wait
cp "$W/indexer/model.safetensors" "$W/model/" && cp "$W/indexer/model.safetensors" \
  "$OUT/indexer.safetensors"
python3 models/train/plot.py --log "$W/indexer/train_log.jsonl" --out "$W/res/indexer-loss.png"
python3 models/train/golden.py --model "$W/model" --prompts tests/data/golden/prompts.json \
  --out "$W/res/indexer-golden.json" --label "models/tiny-v4-indexer (trained, BF16 weights)"
python3 models/train/hf_reference.py --model "$W/model" --out "$W/res/indexer-hf.json" \
  >"$W/res/indexer-hf.log" 2>&1 || echo "hf_reference failed (see indexer-hf.log)"
python3 models/train/eval.py --model "$W/model" --data "$W/eval" --lengths "$EVAL_LENGTHS" \
  --topk dense,16,8,4,2,1 --out "$W/res/indexer-eval.json" >"$W/res/indexer-eval.log" 2>&1
cp "$W/indexer/train_log.jsonl" "$W/res/indexer-train_log.jsonl"
cp "$W/indexer/summary.json" "$W/res/indexer-summary.json"
cp "$W/indexer.log" "$W/res/"
tar -C "$W/res" -czf "$OUT/indexer-results.tar.gz" $(cd "$W/res" && ls)
tail -3 "$W/indexer.log"
cut -c1-150 "$W/res/indexer-eval.log" | tail -40
grep -E "max|warning|error" "$W/res/indexer-hf.log" | tail -4
stamp "device script done"
