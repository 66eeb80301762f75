#!/usr/bin/env bash
# Third H200 stage, one device call, two models trained side by side on the same GPU:
#   clamp    models/tiny-v4 continued with the shared expert's SwiGLU clamped
#            ("swiglu_clamp_shared_expert": true, DeepSeek's current definition and HF's), from the
#            shipped weights, sparse throughout, lr 1e-3, seed 2;
#   indexer  models/tiny-v4-indexer trained from scratch (seed 0): the tiny-v4 shapes with
#            compress_ratios [0, 4, 4, 4] (no ratio-128 layer that sees every block) and index_topk
#            16, so a needle beyond the 128-token window reaches the answer only through the
#            entries the lightning indexer selects.
# Data: `nw data niah` shards written while training starts, 3 rounds x 5 length octaves of the
# default mix (seeds 3000..3014) and 2 rounds x 5 octaves weighted towards distractors as in
# run_device_continue.sh (seeds 3100..3129); held-out eval sets as in run_device.sh (seed 900000+L).
# Each model then gets golden.py (v4.py, fp32), hf_reference.py (HF transformers, fp32) and
# eval.py (PyTorch exact match per length and top-k).
#
#   models/train/run_device_round3.sh CLAMP_SECONDS INDEXER_SECONDS [EVAL_LENGTHS] [EVAL_COUNT]
# Needs: .device/bin/nw (tools/device-pack). Writes to $OUT, per model as soon as it is done:
# NAME.safetensors, then NAME-results.tar.gz (golden, HF reference, eval table, training log,
# loss curve, summary).
set -euo pipefail
CLAMP_SECONDS=${1:?clamp fine-tune seconds}
INDEXER_SECONDS=${2:?indexer model training seconds}
EVAL_LENGTHS=${3:-512,1024,2048,4096,8192,16000}
EVAL_COUNT=${4:-100}
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
NW=$PWD/.device/bin/nw
TOK=models/tiny-v4/tokenizer.json
W=/tmp/nwtrain3
rm -rf "$W" && mkdir -p "$W/data" "$W/eval" "$W/res" "$W/clamp_model" "$W/indexer_model"
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

# Configs: tiny-v4's with the clamp on; the indexer model's from models/train/.
python3 - "$W" <<'EOF'
import json, sys
w = sys.argv[1]
c = json.load(open("models/tiny-v4/config.json"))
c["swiglu_clamp_shared_expert"] = True
json.dump(c, open(w + "/clamp_model/config.json", "w"), indent=2)
EOF
cp models/train/tiny-v4-indexer.json "$W/indexer_model/config.json"
cp "$TOK" "$W/clamp_model/" && cp "$TOK" "$W/indexer_model/"

shard() {  # name count min max seed tasks haystacks
  "$NW" data niah --tokenizer "$TOK" --out "$W/data/$1" --count "$2" --min-len "$3" \
    --max-len "$4" --seed "$5" --tasks $6 --haystacks $7 && touch "$W/data/$1.done"
}
octaves="0:256:511:16000 1:512:1023:8000 2:1024:2047:4000 3:2048:4095:2000 4:4096:8192:1000"
ALL="niah-single niah-multikey niah-repeat"
HAY="noise essay needles"
(
  i=0
  for rep in 0 1 2; do
    for o in $octaves; do
      IFS=: read -r k lo hi n <<<"$o"
      shard "o${k}_mix_$rep" "$n" "$lo" "$hi" $((3000 + i)) "$ALL" "$HAY" &
      i=$((i + 1))
    done
    wait
  done
) &
(
  i=0
  for rep in 0 1; do
    for o in $octaves; do
      IFS=: read -r k lo hi n <<<"$o"
      shard "o${k}_mk_$rep" "$n" "$lo" "$hi" $((3100 + i)) niah-multikey "$HAY" &
      shard "o${k}_sn_$rep" $((n / 2)) "$lo" "$hi" $((3101 + i)) niah-single needles &
      i=$((i + 3))
    done
    wait
  done
) &
for L in ${EVAL_LENGTHS//,/ }; do
  "$NW" data niah --tokenizer "$TOK" --out "$W/eval/len_$L" --count "$EVAL_COUNT" \
    --min-len "$L" --max-len "$L" --seed $((900000 + L)) &
done

finish() {  # name label topk-list
  local m=$W/$1_model
  cp "$W/$1/model.safetensors" "$m/" && cp "$W/$1/model.safetensors" "$OUT/$1.safetensors"
  python3 models/train/plot.py --log "$W/$1/train_log.jsonl" --out "$W/res/$1-loss.png"
  python3 models/train/golden.py --model "$m" --prompts tests/data/golden/prompts.json \
    --out "$W/res/$1-golden.json" --label "$2"
  python3 models/train/hf_reference.py --model "$m" --out "$W/res/$1-hf.json" \
    >"$W/res/$1-hf.log" 2>&1 || echo "hf_reference failed for $1 (see $1-hf.log)"
  python3 models/train/eval.py --model "$m" --data "$W/eval" --lengths "$EVAL_LENGTHS" \
    --topk "$3" --out "$W/res/$1-eval.json" >"$W/res/$1-eval.log" 2>&1
  cp "$W/$1/train_log.jsonl" "$W/res/$1-train_log.jsonl"
  cp "$W/$1/summary.json" "$W/res/$1-summary.json"
  cp "$W/$1.log" "$W/res/"
  tar -C "$W/res" -czf "$OUT/$1-results.tar.gz" $(cd "$W/res" && ls | grep "^$1")
  stamp "$1 done"
}

(
  python3 models/train/train.py --config "$W/clamp_model/config.json" --data "$W/data/o*" \
    --out "$W/clamp" --time-budget "$CLAMP_SECONDS" --seed 2 \
    --init models/tiny-v4/model.safetensors --lr 1e-3 --warmup 50 --curriculum 1.01:8193 \
    --sparse-from 0 >"$W/clamp.log" 2>&1
  finish clamp "models/tiny-v4 (trained, BF16 weights, shared expert clamped)" dense,64,32,16
) &
CLAMP_PID=$!
python3 models/train/train.py --config "$W/indexer_model/config.json" --data "$W/data/o*" \
  --out "$W/indexer" --time-budget "$INDEXER_SECONDS" --seed 0 --sparse-from 0.5 \
  >"$W/indexer.log" 2>&1
stamp "indexer trained"
finish indexer "models/tiny-v4-indexer (trained, BF16 weights)" dense,16,8,4,2,1
wait "$CLAMP_PID"
tail -3 "$W/clamp.log" "$W/indexer.log"
for m in clamp indexer; do tail -12 "$W/res/$m-eval.log"; grep -E "max|warning|error" "$W/res/$m-hf.log" | tail -4; done
stamp "device script done"
