#!/usr/bin/env bash
# Runs Triton's qa/L0_dyna_sequence_batcher/dyna_sequence_batcher_test.py, unchanged, against
# build/nereid as its test.sh does for BACKENDS=onnx: the Oldest strategy with CORRID control on
# Triton's generated onnx(_nobatch)_dyna_sequence_int32 models (one KIND_CPU instance each),
# test_simple_sequence and test_length1_sequence with NO_BATCHING=1, then with
# max_candidate_sequences:4 and a 5 s queue delay the multi-sequence, parallel and backlog tests.
# With 'implicit', the same on gen_qa_dyna_sequence_implicit_models.py's models (IMPLICIT_STATE=1).
# Left out: the custom and custom_string trials and the ragged-batch test (Triton's C++
# custom_dyna_sequence_int32 backend), libtorch and plan.
# Usage: scripts/triton_qa_dyna_sequence.sh TRITON_SERVER_CHECKOUT [implicit]
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
IMPLICIT=0
[ "${2:-}" = implicit ] && IMPLICIT=1
. scripts/triton_harness.sh
T=$(qa_suite L0_dyna_sequence_batcher)
gen=gen_qa_dyna_sequence_models.py
[ $IMPLICIT = 1 ] && gen=gen_qa_dyna_sequence_implicit_models.py
qa_generate $gen --onnx
mkdir -p "$T/models"
for m in "$WORK"/gen/onnx*; do
  cp -r "$m" "$T/models/"
  sed -i "s/kind: KIND_GPU/kind: KIND_CPU/; s/kind: KIND_CPU/kind: KIND_CPU\\ncount: 1/" \
    "$T/models/$(basename "$m")/config.pbtxt"
done
cd "$T"
export BACKENDS=onnx IMPLICIT_STATE=$IMPLICIT
run() {  # TEST, on a fresh server
  serve "$T/models" "$T/$1.server.log" || { total=$((total + 1)); return 0; }
  qa_case $1 "$T/client.log" timeout 600 "$PY" dyna_sequence_batcher_test.py "DynaSequenceBatcherTest.$1"
  stop
}
export NO_BATCHING=1
for test in test_simple_sequence test_length1_sequence; do run $test; done
for m in models/*; do
  sed -i "s/max_candidate_sequences:.*/max_candidate_sequences:4/; s/max_queue_delay_microseconds:.*/max_queue_delay_microseconds:5000000/" "$m/config.pbtxt"
done
export NO_BATCHING=0
for test in test_multi_sequence_different_shape test_multi_sequence test_multi_parallel_sequence \
            test_backlog test_backlog_fill test_backlog_fill_no_end test_backlog_sequence_timeout; do
  run $test
done
echo "L0_dyna_sequence_batcher (onnx$([ $IMPLICIT = 1 ] && echo ", implicit state")): $pass/$total passed"
