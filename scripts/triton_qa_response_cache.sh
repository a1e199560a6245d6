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
"$PY" -m pip install -q onnx >/dev/null
T=$(qa_suite L0_response_cache)
(cd "$WORK/qa/common" && "$PY" gen_qa_models.py --onnx --ensemble --models_dir "$WORK/gen" >/dev/null)
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
pass=0; total=0
for dir in ensemble_cache_decoupled ensemble_cache_composing_decoupled; do
  total=$((total + 1))
  if timeout 60 "$ROOT/build/nereid" serve --model-repository="$T/models/$dir" --http-port=0 \
       --grpc-port=0 --metrics-port=0 --cache-config local,size=10480 \
       --model-control-mode=explicit --load-model=$E >"$T/server.log" 2>&1; then
    echo "FAIL $dir: the server started"
  elif grep -i "response cache does not currently support" "$T/server.log" | grep -qi decoupled; then
    pass=$((pass + 1)); echo "PASS $dir: refused ($(grep -i "response cache does not" "$T/server.log" | head -1 | cut -c1-160))"
  else
    echo "FAIL $dir: $(tail -3 "$T/server.log" | cut -c1-200 | tr '\n' ' ')"
  fi
done
for test in test_ensemble_top_level_response_cache test_ensemble_all_models_cache_enabled \
            test_ensemble_composing_model_cache_enabled test_ensemble_cache_insertion_failure; do
  total=$((total + 1))
  size=10840
  [ "$test" = test_ensemble_cache_insertion_failure ] && size=200
  serve "$T/models/ensemble_models" "$T/server.log" --cache-config "local,size=$size" \
    --model-control-mode=explicit || continue
  ok=0
  timeout 300 "$PY" ensemble_cache_test.py "EnsembleCacheTest.$test" >"$T/client.log" 2>&1 && ok=1
  if [ $ok = 1 ] && [ "$test" = test_ensemble_cache_insertion_failure ] &&
     ! grep -qi "Failed to insert key" "$T/server.log"; then
    ok=0; echo "  (no 'Failed to insert key' in the server log)"
  fi
  if [ $ok = 1 ]; then
    pass=$((pass + 1)); echo "PASS $test"
  else
    echo "FAIL $test: $(grep -E "Error|assert|FAIL" "$T/client.log" | head -3 | cut -c1-250 | tr '\n' ' ')"
    [ -n "${VERBOSE:-}" ] && tail -30 "$T/client.log"
  fi
  stop
done
echo "L0_response_cache (ensemble cases): $pass/$total passed"
