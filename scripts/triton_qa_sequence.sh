#!/usr/bin/env bash
# Runs Triton's own QA test qa/L0_sequence_batcher/sequence_batcher_test.py, unchanged, against this
# build, the way its test.sh does: the models from Triton's generators (gen_qa_sequence_models.py /
# gen_qa_implicit_models.py --onnx, and --ensemble for the ensembles of each sequence model), the
# Python trials from the ONNX configs with Triton's qa/python_models/sequence_int32/model.py, the
# same config edits per model trial (0: no batching x4 instances; 1, 2, 4: max_batch_size 4/2/1
# with 1/2/4 instances; v: variable shapes), the same TRITONSERVER_DELAY_SCHEDULER /
# TRITONSERVER_BACKLOG_DELAY_SCHEDULER per test, one server per test. Prints pass/total per group
# and trial. Differences from test.sh, each because of this machine or a missing Triton backend:
# the ensembles' nop steps (Triton's identity backend) stay on KIND_CPU (test.sh moves them to
# KIND_GPU), the TensorRT, libtorch and custom-backend trials are left out, and the implicit-state
# modes run the ONNX trials only (Triton's Python sequence model keeps no state and Triton builds no
# ensembles of implicit-state models).
# Usage: scripts/triton_qa_sequence.sh TRITON_SERVER_CHECKOUT [implicit|initial-zero|initial-file]
# Needs a checkout of github.com/triton-inference-server/server (not vendored) and the venv from
# scripts/install-deps.sh. MODEL_TRIALS / TESTS / BACKENDS / ENSEMBLES in the environment narrow
# the run.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
MODE=${2:-}
. scripts/triton_harness.sh
cp "$SRC"/qa/common/*.py "$WORK"/
cp "$SRC"/qa/L0_sequence_batcher/sequence_batcher_test.py "$WORK"/
cp "$SRC"/qa/python_models/sequence_int32/model.py "$WORK"/python_sequence_model.py
"$PY" -m pip install -q onnx >/dev/null
cd "$WORK"
export IMPLICIT_STATE=0 INITIAL_STATE_FILE=0 INITIAL_STATE_ZERO=0 USE_SINGLE_BUFFER=0
case "$MODE" in
  "") "$PY" gen_qa_sequence_models.py --onnx --models_dir fixed >/dev/null
      "$PY" gen_qa_sequence_models.py --onnx --variable --models_dir variable >/dev/null
      export BACKENDS=${BACKENDS:-onnx python} ENSEMBLES=${ENSEMBLES:-1} ;;
  implicit) IMPLICIT_STATE=1
      "$PY" gen_qa_implicit_models.py --onnx --models_dir fixed >/dev/null
      "$PY" gen_qa_implicit_models.py --onnx --variable --models_dir variable >/dev/null ;;
  initial-zero|initial-file) IMPLICIT_STATE=1
      [ "$MODE" = initial-zero ] && INITIAL_STATE_ZERO=1 || INITIAL_STATE_FILE=1
      "$PY" gen_qa_implicit_models.py --onnx --initial-state zero --models_dir fixed >/dev/null
      "$PY" gen_qa_implicit_models.py --onnx --initial-state zero --variable --models_dir variable >/dev/null ;;
  *) echo "unknown mode '$MODE'"; exit 2 ;;
esac
export BACKENDS=${BACKENDS:-onnx} ENSEMBLES=${ENSEMBLES:-0}
export TEST_SYSTEM_SHARED_MEMORY=0 TEST_CUDA_SHARED_MEMORY=0
if [ "$ENSEMBLES" = 1 ]; then
  "$PY" gen_qa_sequence_models.py --ensemble --models_dir ens_fixed >/dev/null
  "$PY" gen_qa_sequence_models.py --ensemble --variable --models_dir ens_variable >/dev/null
fi
printf '\x64\x00\x00\x00' > input_state_data

# test.sh's get_datatype: string state for the ONNX models only, with implicit state.
dtypes() { if [ "$IMPLICIT_STATE" = 1 ] && [ "$1" = onnx ]; then echo "object int32 bool"; else echo "int32 bool"; fi; }
# place SOURCE REPOSITORY: copies a model as test.sh does; a python_* model is made from its ONNX
# twin (generate_python_models: an ensemble's names rewritten, a model given backend "python" and
# Triton's model.py).
place() {
  local src=$1 name dest
  name=$(basename "$src"); dest=$2/$name
  if [[ "$name" == *python* ]]; then
    src=${src//python/onnx}
    mkdir -p "$dest/1"
    if [[ "$name" =~ ^(simple|sequence|fan)_ ]]; then
      sed 's/onnx/python/g' "$src/config.pbtxt" > "$dest/config.pbtxt"
    else
      sed 's/platform:.*/backend: "python"/; s/onnx/python/g' "$src/config.pbtxt" > "$dest/config.pbtxt"
      cp python_sequence_model.py "$dest/1/model.py"
    fi
  else
    cp -r "$src" "$dest"
  fi
}
# The config edits of qa/L0_sequence_batcher/test.sh: max_batch_size and instance count per trial.
edit() {  # DIR MAX_BATCH_SIZE COUNT
  (cd "$1" && { [ -z "$2" ] || sed -i "s/^max_batch_size:.*/max_batch_size: $2/" config.pbtxt; } &&
    sed -i "s/kind: KIND_GPU/kind: KIND_CPU/; s/kind: KIND_CPU/kind: KIND_CPU\\ncount: $3/" config.pbtxt)
  if [ "$INITIAL_STATE_FILE" = 1 ]; then
    mkdir -p "$1/initial_state" && cp input_state_data "$1/initial_state/"
    sed -i 's/zero_data.*/data_file:"input_state_data"/' "$1/config.pbtxt"
  fi
}
# models BATCHING SOURCE_DIR ENSEMBLE_DIR: the sequence models of test.sh's list for one repository
# (BATCHING: "" or "_nobatch"), ensembles of each (not of bool) when ENSEMBLES=1.
models() {
  local b d e
  for b in $BACKENDS; do
    for d in $(dtypes "$b"); do echo "$2/${b}${1}_sequence_$d"; done
    [ "$ENSEMBLES" = 1 ] || continue
    for d in $(dtypes "$b"); do
      [ "$d" = bool ] && continue
      for e in simple sequence fan; do
        if [ "$b" = python ]; then echo "ens_fixed/${e}_python${1}_sequence_$d"
        else echo "$3/${e}_${b}${1}_sequence_$d"; fi
      done
    done
  done
}
mkdir -p models0 models1 models2 models4 modelsv queue_delay_models
for m in $(models "" fixed ens_fixed); do
  for t in 1:4:1 2:2:2 4:1:4; do
    IFS=: read -r trial mbs count <<<"$t"
    place "$m" models$trial && edit "models$trial/$(basename "$m")" "$mbs" "$count"
  done
  [[ "$(basename "$m")" =~ ^(simple|sequence|fan)_ ]] && continue  # the queue tests skip ensembles
  q=queue_delay_models/$(basename "$m")
  place "$m" queue_delay_models && edit "$q" 4 1
  sed -i 's/sequence_batching {/sequence_batching {\ndirect {\nmax_queue_delay_microseconds: 3000000\nminimum_slot_utilization: 0\n}/' $q/config.pbtxt
  for u in half:0.5 full:1; do
    IFS=: read -r suffix util <<<"$u"
    cp -r "$q" "${q}_$suffix"
    sed -i "s/$(basename "$m")/$(basename "$m")_$suffix/; s/minimum_slot_utilization: 0/minimum_slot_utilization: $util/" "${q}_$suffix/config.pbtxt"
  done
done
for m in $(models _nobatch fixed ens_fixed); do place "$m" models0 && edit "models0/$(basename "$m")" "" 4; done
for m in $(models "" variable ens_variable); do place "$m" modelsv && edit "modelsv/$(basename "$m")" 4 1; done
if [ "$ENSEMBLES" = 1 ]; then
  for r in models0 models1 models2 models4 modelsv; do
    for n in ens_fixed/nop_*; do cp -r "$n" $r/ && mkdir -p "$r/$(basename "$n")/1"; done
  done
fi

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

# Each test is one case of the harness's tally; each group's share is reported as it ends.
group_start() { group_pass=$pass; group_total=$total; }
group_report() {
  [ "$total" -gt "$group_total" ] &&
    echo "$1: $((pass - group_pass))/$((total - group_total)) passed"
  return 0
}
case_of() {  # TEST REPOSITORY BACKLOG_HOOK DELAY_HOOK
  if run_test "$2" "$1" "$3" "$4"; then qa_verdict "$1 ($2)" ""; else qa_verdict "$1 ($2)" "above"; fi
}
for trial in ${MODEL_TRIALS:-0 1 2 4 v}; do
  export NO_BATCHING=0 MODEL_INSTANCES=1 BATCHER_TYPE=FIXED
  [ "$trial" = 0 ] && NO_BATCHING=1 && MODEL_INSTANCES=4
  [ "$trial" != 0 ] && [ "$trial" != v ] && MODEL_INSTANCES=$trial
  [ "$trial" = v ] && BATCHER_TYPE=VARIABLE
  for group in NO_DELAY DELAY; do
    group_start
    for t in ${!group}; do
      [ -n "${TESTS:-}" ] && [[ " $TESTS " != *" $t "* ]] && continue
      if [ "$group" = NO_DELAY ]; then set -- "" ""; else set -- $(hooks "$t"); fi
      case_of "$t" "models$trial" "$1" "$2"
    done
    group_report "models$trial $group"
  done
done
export NO_BATCHING=0 MODEL_INSTANCES=1 BATCHER_TYPE=FIXED
group_start
for t in $QUEUE; do
  [ -n "${TESTS:-}" ] && [[ " $TESTS " != *" $t "* ]] && continue
  case_of "$t" queue_delay_models 0 2
done
group_report "queue_delay_models QUEUE_DELAY"
label="${BACKENDS// /, }${MODE:+; $MODE}"
[ "$ENSEMBLES" = 1 ] && label="$label; ensembles"
qa_summary "L0_sequence_batcher ($label)"
