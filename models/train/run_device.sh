#!/usr/bin/env bash
# The H200 side of training models/tiny-v4, in one command (the device tool's `run`):
#   1. golden outputs of the random seed-0 checkpoint (nw model init --seed 0, carried in
#      .trainwork/random-seed0) for tests/cpu_backend/golden_test.cc (RANDOM_GOLDEN=0 skips);
#   2. NIAH training shards from `nw data niah` (5 rounds of one process per length octave,
#      seeds 1000..1024) and held-out evaluation sets (seed 900000+L), written while training
#      starts;
#   3. train.py for TRAIN_SECONDS of wall time (seed 0), export BF16 safetensors;
#   4. plot.py (loss.png), golden.py on the exported checkpoint, eval.py (PyTorch eval table).
# Everything that must come back is written to $OUT (at most 8 files), the essentials first.
#
#   models/train/run_device.sh TRAIN_SECONDS [EVAL_LENGTHS] [EVAL_COUNT]
# Needs: .device/bin/nw (tools/device-pack), models/tiny-v4/{config,tokenizer}.json.
set -euo pipefail
TRAIN_SECONDS=${1:?training seconds}
EVAL_LENGTHS=${2:-512,1024,2048,4096,8192,16000}
EVAL_COUNT=${3:-100}
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
NW=$PWD/.device/bin/nw
TOK=models/tiny-v4/tokenizer.json
W=/tmp/nwtrain
rm -rf "$W" && mkdir -p "$W/data" "$W/eval" "$W/model"
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

# 1. Random-checkpoint golden (fp32).
if [ "${RANDOM_GOLDEN:-1}" != 0 ]; then
  python3 models/train/golden.py --model .trainwork/random-seed0 \
    --prompts tests/data/golden/prompts.json --out "$OUT/random-seed0.json" \
    --label "nw model init --config models/train/tiny-v4.json --seed 0 (BF16 layout)"
fi

# 2. Data. Octave shards of about 6M tokens each: [256,512) .. [4096,8192].
shard() {  # name count min max seed
  "$NW" data niah --tokenizer "$TOK" --out "$W/data/$1" --count "$2" --min-len "$3" \
    --max-len "$4" --seed "$5" && touch "$W/data/$1.done"
}
i=0
for rep in 0 1 2 3 4; do
  shard "o0_$rep" 16000 256 511 $((1000 + i)) & i=$((i + 1))
  shard "o1_$rep" 8000 512 1023 $((1000 + i)) & i=$((i + 1))
  shard "o2_$rep" 4000 1024 2047 $((1000 + i)) & i=$((i + 1))
  shard "o3_$rep" 2000 2048 4095 $((1000 + i)) & i=$((i + 1))
  shard "o4_$rep" 1000 4096 8192 $((1000 + i)) & i=$((i + 1))
  wait
done &
for L in ${EVAL_LENGTHS//,/ }; do
  "$NW" data niah --tokenizer "$TOK" --out "$W/eval/len_$L" --count "$EVAL_COUNT" \
    --min-len "$L" --max-len "$L" --seed $((900000 + L)) &
done

# 3. Train (waits for the first shards by itself).
python3 models/train/train.py --config models/tiny-v4/config.json --data "$W/data/o*" \
  --out "$W/run" --time-budget "$TRAIN_SECONDS" --seed 0 2>&1 | tee "$W/train.log"
wait
cp models/tiny-v4/config.json models/tiny-v4/tokenizer.json "$W/run/model.safetensors" "$W/model/"

# 4. Weights, log, loss curve and golden first; then the eval table.
cp "$W/run/model.safetensors" "$W/run/train_log.jsonl" "$OUT/"
python3 models/train/plot.py --log "$W/run/train_log.jsonl" --out "$OUT/loss.png"
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
