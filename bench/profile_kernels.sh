#!/usr/bin/env bash
# Where a job's GPU time goes, kernel by kernel: Nsight Compute times every kernel of
# gpu_throughput_bench's jobs (one untimed warm-up job and JOBS timed jobs per length) and
# bench/kernel_profile.py sums the durations per kernel name, then per launch shape (grid, block).
#   LENGTHS=2048,8192,32768 bash bench/profile_kernels.sh        (on the GPU machine)
# Env: LENGTHS, JOBS (1), BACKEND (cuda), PRECISION (fp32), OUT (/tmp/nw-profile).
# ncu serialises kernels, so wall times under it mean nothing; the per-kernel durations do
# (clocks left alone: --clock-control none).
set -euo pipefail
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/nw-profile}
mkdir -p "$OUT"
NCU=${NCU:-ncu}
IFS=, read -ra lens <<<"${LENGTHS:-2048,8192,32768}"
for L in "${lens[@]}"; do
  rep=$OUT/kernels-$L
  "$NCU" --clock-control none --metrics gpu__time_duration.sum -f -o "$rep" \
    .device/bin/gpu_throughput_bench --model models/tiny-v4 --backend "${BACKEND:-cuda}" \
    --precision "${PRECISION:-fp32}" --lengths "$L" --jobs "${JOBS:-1}" --time-cap 1 \
    >"$OUT/bench-$L.log" 2>&1
  "$NCU" --import "$rep.ncu-rep" --csv --page raw --print-units base --metrics gpu__time_duration.sum >"$rep.csv"
  python3 bench/kernel_profile.py "$rep.csv" --jobs $((${JOBS:-1} + 1)) --title "$L tokens" --by-launch |
    tee "$OUT/kernels-$L.txt"
  rm -f "$rep.ncu-rep"
done
