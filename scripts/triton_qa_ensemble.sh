#!/usr/bin/env bash
# Runs Triton's qa/L0_simple_ensemble/ensemble_test.py, unchanged, against build/nereid as its
# test.sh does: its four tests, each on a fresh server over the suite's own models (simple with
# versions 1 and 2 from this checkout's generated ONNX 'simple', Triton's ensemble configs and its
# Python partial_add_sub), the last one with --log-verbose=1 and SERVER_LOG set.
# Usage: scripts/triton_qa_ensemble.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
T=$(qa_suite L0_simple_ensemble)
"$PY" examples/generate_models.py --out "$WORK/gen" >/dev/null
for v in 1 2; do mkdir -p "$T/models/simple/$v" && cp "$WORK/gen/simple/1/model.onnx" "$T/models/simple/$v/"; done
mkdir -p "$T/models/ensemble_add_sub_int32_int32_int32/1" "$T/models/ensemble_partial_add_sub/1"
cd "$T"
for test in test_ensemble_add_sub test_ensemble_sequence_flags test_ensemble_add_sub_one_output \
            test_ensemble_partial_add_sub; do
  args=()
  [ "$test" = test_ensemble_partial_add_sub ] && args=(--log-verbose=1)
  qa_served "$test" "$T/models" "${args[@]}" -- \
    env SERVER_LOG="$WORK/server.log" timeout 300 "$PY" ensemble_test.py "EnsembleTest.$test"
done
qa_summary "L0_simple_ensemble"
