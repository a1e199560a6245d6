#!/usr/bin/env bash
# Runs Triton's own QA test qa/L0_sequence_batcher/sequence_batcher_test.py, unchanged, against this
# build, the way its test.sh does for the ONNX backend: the models from Triton's generators
# (gen_qa_sequence_models.py / gen_qa_implicit_models.py --onnx), the same config edits per model
# trial (0: no batching x4 instances; 1, 2, 4: max_batch_size 4/2/1 with 1/2/4 instances; v:
# variable shapes), the same TRITONSERVER_DELAY_SCHEDULER / TRITONSERVER_BACKLOG_DELAY_SCHEDULER
# per test, one server per test. Prints pass/total per group and trial. Ensembles are left out
# (ENSEMBLES=0: not built yet), as are the custom and python backends' trials.
# Usage: scripts/triton_qa_sequence.sh TRITON_SERVER_CHECKOUT [implicit|initial-zero|initial-file]
# Needs a checkout of github.com/triton-inference-server/server (not vendored) and the venv from
# scripts/install-deps.sh. MODEL_TRIALS / TESTS in the environment narrow the run.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
MODE=${2:-}
. scripts/triton_harness.sh
cp "$SRC"/qa/common/*.py "$WORK"/
cp "$SRC"/qa/L0_sequence_batcher/sequence_batcher_test.py "$WORK"/
"$PY" -m pip install -q onnx >/dev/null
cd "$WORK"
export IMPLICIT_STATE=0 INITIAL_STATE_FILE=0 INITIAL_STATE_ZERO=0 USE_SINGLE_BUFFER=0
DTYPES="int32 bool"
case "$MODE" in
  "") "$PY" gen_qa_sequence_models.py --onnx --models_dir fixed >/dev/null
      "$PY" gen_qa_sequence_models.py --onnx --variable --models_dir variable >/dev/null ;;
  implicit) IMPLICIT_STATE=1; DTYPES="object int32 bool"
      "$PY" gen_qa_implicit_models.py --onnx --models_dir fixed >/dev/null
      "$PY" gen_qa_implicit_models.py --onnx --variable --models_dir variable >/dev/null ;;
  initial-zero|initial-file) IMPLICIT_STATE=1; DTYPES="object int32 bool"
      [ "$MODE" = initial-zero ] && INITIAL_STATE_ZERO=1 || INITIAL_STATE_FILE=1
      "$PY" gen_qa_implicit_models.py --onnx --initial-state zero --models_dir fixed >/dev/null
      "$PY" gen_qa_implicit_models.py --onnx --initial-state zero --variable --models_dir variable >/dev/null ;;
  *) echo "unknown mode '$MODE'"; exit 2 ;;
esac
export BACKENDS=onnx ENSEMBLES=0 TEST_SYSTEM_SHARED_MEMORY=0 TEST_CUDA_SHARED_MEMORY=0
printf '\x64\x00\x00\x00' > input_state_data

# The config edits of qa/L0_sequence_batcher/test.sh: max_batch_size and instance count per trial.
edit() {  # DIR MAX_BATCH_SIZE COUNT
  (cd "$1" && { [ -z "$2" ] || sed -i "s/^max_batch_size:.*/max_batch_size: $2/" config.pbtxt; } &&
    sed -i "s/kind: KIND_GPU/kind: KIND_CPU/; s/kind: KIND_CPU/kind: KIND_CPU\\ncount: $3/" config.pbtxt)
  if [ "$INITIAL_STATE_FILE" = 1 ]; then
    mkdir -p "$1/initial_state" && cp input_state_data "$1/initial_state/"
    sed -i 's/zero_data.*/data_file:"input_state_data"/' "$1/config.pbtxt"
  fi
}
mkdir -p models0 models1 models2 models4 modelsv queue_delay_models
for d in $DTYPES; do
  for t in 1:4:1 2:2:2 4:1:4; do
    IFS=: read -r trial mbs count <<<"$t"
    cp -r fixed/onnx_sequence_$d models$trial/ && edit models$trial/onnx_sequence_$d "$mbs" "$count"
  done
  cp -r fixed/onnx_nobatch_sequence_$d models0/ && edit models0/onnx_nobatch_sequence_$d "" 4
  cp -r variable/onnx_sequence_$d modelsv/ && edit modelsv/onnx_sequence_$d 4 1
  q=queue_delay_models/onnx_sequence_$d
  cp -r fixed/onnx_sequence_$d $q && edit $q 4 1
  sed -i 's/sequence_batching {/sequence_batching {\ndirect {\nmax_queue_delay_microseconds: 3000000\nminimum_slot_utilization: 0\n}/' $q/config.pbtxt
  for u in half:0.5 full:1; do
    IFS=: read -r suffix util <<<"$u"
    cp -r $q ${q}_$suffix
    sed -i "s/onnx_sequence_$d/onnx_sequence_${d}_$suffix/; s/minimum_slot_utilization: 0/minimum_slot_utilization: $util/" ${q}_$suffix/config.pbtxt
  done
done

NO_DELAY="test_simple_sequence test_length1_sequence test_batch_size test_no_sequence_start
          test_no_sequence_start2 test_no_sequence_end test_no_correlation_id"
DELAY="test_backlog_fill test_backlog_fill_no_end test_backlog_same_correlation_id
       test_backlog_same_correlation_id_no_end test_backlog_sequence_timeout test_half_batch
       test_skip_batch test_full_batch test_ragged_batch test_backlog"
QUEUE="test_queue_delay_no_min_util test_queue_delay_half_min_util test_queue_delay_full_min_util"
# test.sh's choice of hook values per delay test.
hooks() {
  case "$1" in
    test_backlog_fill_no_end) echo "3 10" ;;
    test_backlog_fill) echo "2 10" ;;
    test_backlog_same_correlation_id) echo "2 12" ;;
    test_backlog_same_correlation_id_no_end) echo "0 16" ;;
    test_half_batch) echo "0 8" ;;
    test_backlog_sequence_timeout) echo "0 4" ;;
    *) echo "0 12" ;;
  esac
}
run_test() {  # REPOSITORY TEST BACKLOG_HOOK DELAY_HOOK
  local log="$WORK/$2.$1.server.log"
  # Exported for the server and the test alike, as test.sh does (the test reads them too).
  unset TRITONSERVER_BACKLOG_DELAY_SCHEDULER TRITONSERVER_DELAY_SCHEDULER
  [ -z "$4" ] || export TRITONSERVER_BACKLOG_DELAY_SCHEDULER=$3 TRITONSERVER_DELAY_SCHEDULER=$4
  serve "$WORK/$1" "$log" --log-verbose=1 || return 1
  rm -f test_results.txt
  if timeout 600 "$PY" sequence_batcher_test.py "SequenceBatcherTest.$2" >"$WORK/$2.$1.client.log" 2>&1; then
    stop; return 0
  fi
  stop
  echo "  FAIL $2 ($1):"
  grep -E "Error|assert|Exception" "$WORK/$2.$1.client.log" | head -3 | cut -c1-300 | sed 's/^/    /'
  [ -n "${KEEP:-}" ] && cp "$WORK/$2.$1".*.log "$KEEP"/ 2>/dev/null
  return 1
}

TOTAL_PASS=0; TOTAL=0
report() { echo "$1: $2/$3 passed"; TOTAL_PASS=$((TOTAL_PASS + $2)); TOTAL=$((TOTAL + $3)); }
for trial in ${MODEL_TRIALS:-0 1 2 4 v}; do
  export NO_BATCHING=0 MODEL_INSTANCES=1 BATCHER_TYPE=FIXED
  [ "$trial" = 0 ] && NO_BATCHING=1 && MODEL_INSTANCES=4
  [ "$trial" != 0 ] && [ "$trial" != v ] && MODEL_INSTANCES=$trial
  [ "$trial" = v ] && BATCHER_TYPE=VARIABLE
  for group in NO_DELAY DELAY; do
    pass=0; n=0
    for t in ${!group}; do
      [ -n "${TESTS:-}" ] && [[ " $TESTS " != *" $t "* ]] && continue
      n=$((n + 1))
      if [ "$group" = NO_DELAY ]; then set -- "" ""; else set -- $(hooks "$t"); fi
      run_test "models$trial" "$t" "$1" "$2" && pass=$((pass + 1)) || true
    done
    [ "$n" -gt 0 ] && report "models$trial $group" $pass $n
  done
done
export NO_BATCHING=0 MODEL_INSTANCES=1 BATCHER_TYPE=FIXED
pass=0; n=0
for t in $QUEUE; do
  [ -n "${TESTS:-}" ] && [[ " $TESTS " != *" $t "* ]] && continue
  n=$((n + 1))
  run_test queue_delay_models "$t" 0 2 && pass=$((pass + 1)) || true
done
[ "$n" -gt 0 ] && report "queue_delay_models QUEUE_DELAY" $pass $n
echo "L0_sequence_batcher (onnx${MODE:+, $MODE}): $TOTAL_PASS/$TOTAL passed"
