#!/usr/bin/env bash
# Runs the ensemble cases of Triton's qa/L0_response_cache, unchanged, against build/nereid as its
# test.sh does: the two load refusals (a cache on an ensemble declared decoupled, and on one made
# decoupled by its composing model) and ensemble_cache_test.py's four tests (top-level cache,
# cache on every model, cache on the composing model only, an insertion that fails for size), each
# on a fresh server in explicit mode with --cache-config local,size=10840 (200 for the last).
# Models: Triton's generators (gen_qa_models.py --onnx --ensemble): simple_onnx_float32_float32_float32
# over onnx_float32_float32_float32. Left out: the Redis cases and the valgrind memory-growth run.
# Usage: scripts/triton_qa_response_cache.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
T=$(qa_suite L0_response_cache)
qa_generate gen_qa_models.py --onnx --ensemble
E=simple_onnx_float32_float32_float32
C=onnx_float32_float32_float32
for dir in ensemble_models ensemble_cache_decoupled ensemble_cache_composing_decoupled; do
  mkdir -p "$T/models/$dir"
  cp -r "$WORK/gen/$E" "$WORK/gen/$C" "$T/models/$dir/"
done
printf 'response_cache { enable: True }\nmodel_transaction_policy { decoupled: True }\n' \
  >>"$T/models/ensemble_cache_decoupled/$E/config.pbtxt"
echo 'response_cache { enable: True }' >>"$T/models/ensemble_cache_composing_decoupled/$E/config.pbtxt"
echo 'model_transaction_policy { decoupled: True }' \
  >>"$T/models/ensemble_cache_composing_decoupled/$C/config.pbtxt"
cd "$T"
for dir in ensemble_cache_decoupled ensemble_cache_composing_decoupled; do
  qa_refused "Response Cache does not currently support model $E with 'decoupled' transaction policy" \
    "$T/models/$dir" --cache-config local,size=10480 --model-control-mode=explicit --load-model=$E
done
cache_test() {  # TEST: Triton's test passes, and a failed insertion is in the server log
  timeout 300 "$PY" ensemble_cache_test.py "EnsembleCacheTest.$1" || return 1
  if [ "$1" = test_ensemble_cache_insertion_failure ] && ! grep -qi "Failed to insert key" "$T/server.log"; then
    echo "FAIL: no 'Failed to insert key' in the server log"
    return 1
  fi
}
for test in test_ensemble_top_level_response_cache test_ensemble_all_models_cache_enabled \
            test_ensemble_composing_model_cache_enabled test_ensemble_cache_insertion_failure; do
  size=10840
  [ "$test" = test_ensemble_cache_insertion_failure ] && size=200
  if serve "$T/models/ensemble_models" "$T/server.log" --cache-config "local,size=$size" \
       --model-control-mode=explicit; then
    qa_case $test "$T/client.log" cache_test $test
    stop
  else
    total=$((total + 1))
  fi
done
echo "L0_response_cache (ensemble cases): $pass/$total passed"
