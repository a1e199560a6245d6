#!/usr/bin/env bash
# Runs Triton's qa/L0_rate_limiter/rate_limiter_test.py, unchanged, against build/nereid with the
# server arguments and model edits of its test.sh: the load errors (counts too small, a resource
# both global and per device), cross-model prioritization with limited and plenty resources,
# a single model with two prioritized groups (limited slower than plenty), and dynamic batching
# under TRITONSERVER_DELAY_SCHEDULER. The instance groups are KIND_CPU here (test.sh asks for
# KIND_GPU; CPU instances count as device 0, as in Triton). Left out: the sequence-batching case
# (it needs Triton's custom C++ 'sequence' backend).
# Usage: scripts/triton_qa_rate_limiter.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
T=$(qa_suite L0_rate_limiter)
M="$T/custom_models"
mkdir -p "$M"
cp -r "$SRC/qa/custom_models/custom_zero_1_float32" "$M/"
mkdir -p "$M/custom_zero_1_float32/1"
cp -r "$M/custom_zero_1_float32" "$M/custom_zero_1_float32_v2"
group() {  # CONFIG RATE_LIMITER [COUNT]
  printf 'instance_group [{\nkind: KIND_CPU count: %s\n%s\n}]\n' "${3:-1}" "$2" >>"$1"
}
delay() { printf 'parameters [\n{ key: "execute_delay_ms"; value: { string_value: "%s" }}\n]\n' "$2" >>"$1"; }
for m in custom_zero_1_float32 custom_zero_1_float32_v2; do
  sed -i "s/custom_zero_1_float32\"/$m\"/; s/dims:.*\[.*\]/dims: [ -1 ]/g; s/max_batch_size:.*/max_batch_size: 4/" "$M/$m/config.pbtxt"
done
group "$M/custom_zero_1_float32/config.pbtxt" 'rate_limiter { resources [{name: "resource1" count: 4 }]}'
delay "$M/custom_zero_1_float32/config.pbtxt" 100
group "$M/custom_zero_1_float32_v2/config.pbtxt" \
  'rate_limiter { resources [{name: "resource1" count: 2 }, {name: "resource2" global: True count: 2 }] priority: 2}'
delay "$M/custom_zero_1_float32_v2/config.pbtxt" 100
cd "$T"
runs() {  # TEST ARGS...: the test passes against a server started with ARGS (DURATION: its seconds)
  local test=$1
  shift
  qa_served "$test ($*)" "$M" "$@" -- timeout 300 "$PY" rate_limiter_test.py "RateLimiterTest.$test"
}
R="--rate-limit=execution_count"
qa_refused 'Resource count for "resource1" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 4' "$M" \
  $R --rate-limit-resource=resource1:1
qa_refused 'Resource count for "resource1" is limited to 3 which will prevent scheduling of one or more model instances, the minimum required count is 4' "$M" \
  $R --rate-limit-resource=resource1:3 --rate-limit-resource=resource2:2
qa_refused 'Resource count for "resource1" is limited to 0 which will prevent scheduling of one or more model instances, the minimum required count is 4' "$M" \
  $R --rate-limit-resource=resource1:10:10 --rate-limit-resource=resource2:2
cp -r "$M/custom_zero_1_float32_v2" "$M/custom_zero_1_float32_v3"
sed -i "s/custom_zero_1_float32_v2/custom_zero_1_float32_v3/g; s/global: True/global: False/g" "$M/custom_zero_1_float32_v3/config.pbtxt"
qa_refused 'Resource "resource2" is present as both global and device-specific resource in the model configuration.' "$M" $R
rm -rf "$M/custom_zero_1_float32_v3"
runs test_cross_model_prioritization_limited_resource $R --rate-limit-resource=resource1:4 --rate-limit-resource=resource2:2
runs test_cross_model_prioritization_limited_resource $R
runs test_cross_model_prioritization_plenty_resource $R --rate-limit-resource=resource1:6 --rate-limit-resource=resource2:2
# One model, two prioritized groups: limited resources take longer than plenty.
rm -rf "$M/custom_zero_1_float32_v2"
group "$M/custom_zero_1_float32/config.pbtxt" \
  'rate_limiter { resources [{name: "resource1" count: 2 }, {name: "resource2" global: True count: 2 }] priority: 2}'
runs test_single_model $R; limited=$DURATION
runs test_single_model $R --rate-limit-resource=resource1:6 --rate-limit-resource=resource2:2; plenty=$DURATION
qa_verdict "limited ${limited} s > plenty ${plenty} s" \
  "$([ "$limited" -gt "$plenty" ] || echo "limited is not longer than plenty")"
qa_refused 'Resource count for "resource1" is limited to 3 which will prevent scheduling of one or more model instances, the minimum required count is 4' "$M" \
  $R --rate-limit-resource=resource1:3 --rate-limit-resource=resource2:2
sed -i 's/.*execute_delay_ms.*/{ key: "execute_delay_ms"; value: { string_value: "1000" }}/' "$M/custom_zero_1_float32/config.pbtxt"
printf 'dynamic_batching { preferred_batch_size: [ 1, 2, 3, 4 ]\n max_queue_delay_microseconds: 5000000 }\n' >>"$M/custom_zero_1_float32/config.pbtxt"
export TRITONSERVER_DELAY_SCHEDULER=8
runs test_single_model_dynamic_batching $R
unset TRITONSERVER_DELAY_SCHEDULER
qa_summary "L0_rate_limiter (test_single_model_sequence_batching left out: Triton's C++ 'sequence' backend)"
