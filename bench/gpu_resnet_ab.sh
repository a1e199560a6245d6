#!/usr/bin/env bash
# ResNet-50 on the native GPU engine, several builds on one GPU in one call: bench_native of this
# bundle ("new") and of other builds (.devcarry/old/NAME.xz, "old" for bench_native.xz) alternating
# round by round, host to host, then each build's steps timed alone (--profile). The device host's PyTorch
# exports torchvision's ResNet-50 (scripts/vision_models.py --torchvision).
# Prepare here:  GPU=1 MODELS= scripts/device_carry.sh
#                strip -o /tmp/b OLD_BUILD/bench_native && xz -9 -c /tmp/b > .devcarry/old/bench_native.xz
# Run there:     device run, carry [".devcarry"], command: bash bench/gpu_resnet_ab.sh
# BATCHES (default "256 1"), PRECISION (bf16), ROUNDS (2), ITERS (30), PROFILE (steps listed, 40;
# 0: none); ENVS: this bundle's build again under each of these environment settings (e.g.
# "NEREID_GPU_SPLIT_FIRST=50"; named by the setting); logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
. scripts/device_env.sh
declare -A BIN=([new]="$C/bin/bench_native") SETTING=()
WHO=()
for setting in ${ENVS:-}; do
  BIN[$setting]="$C/bin/bench_native"; SETTING[$setting]=$setting; WHO+=("$setting")
done
for xz in "$C"/old/*.xz; do  # each other build, named by its file (bench_native.xz: "old")
  [ -f "$xz" ] || continue
  name=$(basename "$xz" .xz); [ "$name" = bench_native ] && name=old
  [ -x "/tmp/ab_$name" ] || { xz -dc "$xz" > "/tmp/ab_$name" && chmod +x "/tmp/ab_$name"; }
  BIN[$name]="/tmp/ab_$name"; WHO+=("$name")
done
WHO+=(new)
MODEL=/tmp/vm/resnet50.onnx
[ -f "$MODEL" ] || python3 scripts/vision_models.py /tmp/vm --models resnet50 --torchvision > /dev/null ||
  exit 1
PRECISION="${PRECISION:-bf16}"
run() {  # run WHO BATCH [ARGS...]: one bench_native run (round $r), its log under $OUT
  local who=$1 b=$2
  shift 2
  local log="$OUT/${who//[^A-Za-z0-9_]/_}_b${b}_r${r}.log"
  env ${SETTING[$who]:+"${SETTING[$who]}"} "${BIN[$who]}" --model="$MODEL" --shape="$b,3,224,224" --batch="$b" \
    --gpu="$PRECISION" "$@" > "$log" 2>&1
  grep "^run_us" "$log" || tail -3 "$log"
}
echo "== ResNet-50 $PRECISION, host to host, us per batch (bench_native --iterations=${ITERS:-30})"
for b in ${BATCHES:-256 1}; do
  for r in $(seq "${ROUNDS:-2}"); do
    for who in "${WHO[@]}"; do
      printf 'batch %-4s round %s %-4s %s\n' "$b" "$r" "$who" "$(run "$who" "$b" --iterations="${ITERS:-30}")"
    done
  done
done
if [ "${PROFILE:-40}" -gt 0 ]; then
  for b in ${BATCHES:-256 1}; do
    for who in "${WHO[@]}"; do
      echo "== $who, batch $b: the steps alone (--profile=${PROFILE:-40})"
      env ${SETTING[$who]:+"${SETTING[$who]}"} "${BIN[$who]}" --model="$MODEL" --shape="$b,3,224,224" --batch="$b" \
        --gpu="$PRECISION" --iterations=10 --profile="${PROFILE:-40}" 2>&1 |
        tee "$OUT/profile_${who//[^A-Za-z0-9_]/_}_b$b.txt" |
        sed -n '/^run_us/,$p'
    done
  done
fi
