#!/usr/bin/env bash
# Runs on the lent device machine: Triton's model_analyzer (PyPI triton-model-analyzer) profiles
# Nereid with the real perf_analyzer (glibc >= 2.38: the device host only). Remote launch mode: a
# Nereid started here in explicit mode, model_analyzer loading each configuration it tries through
# the repository API; local launch mode: model_analyzer starts Nereid itself through
# scripts/tritonserver (Nereid under tritonserver's name). Models: `simple` (ONNX Runtime, CPU) and
# recommend_model on the GPU (native engine, examples/models_gpu). Reports (CSV, HTML) go to $OUT.
# Carry: .devcarry (SERVE_ONLY=1 MODELS= scripts/device_carry.sh) and .ma (the wheels the host
# lacks; see docs/deploy.md). Usage: MA_SECONDS=150 [MA_MAX_CONCURRENCY=8 MA_MAX_INSTANCES=2
# MA_MAX_BATCH=8 MA_RUNS="simple_remote recommend_remote simple_local"] scripts/device_model_analyzer.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. scripts/device_env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -c 'import model_analyzer' 2>/dev/null ||
  python3 -m pip install -q --no-index --find-links .ma triton-model-analyzer tritonclient 2>"$OUT/pip.log" ||
  python3 -m pip install -q --no-deps .ma/*.whl 2>>"$OUT/pip.log"
python3 -c 'import model_analyzer, tritonclient.grpc' || { tail -20 "$OUT/pip.log"; exit 1; }
M=/tmp/ma_models
device_models "$M" examples/models/simple examples/models_gpu/recommend_model || exit 1
NEREID_BIN="$PWD/$C/bin/nereid"
export NEREID_BIN
ma() {  # ma NAME MODE YAML-LINES...: one model_analyzer profile, then its summary
  local name=$1 mode=$2 dir=/tmp/ma_$1
  shift 2
  rm -rf "$dir" && mkdir -p "$dir/export"
  {
    echo "model_repository: $M"
    echo "triton_launch_mode: $mode"
    echo "perf_analyzer_path: ${PA:-$PWD/$C/bin/perf_analyzer}"
    echo "output_model_repository_path: $dir/output"
    echo "override_output_model_repository: true"
    echo "checkpoint_directory: $dir/ckpt"
    echo "export_path: $dir/export"
    # No DCGM on the host: remote mode reads GPU metrics from the server's endpoint instead;
    # model_analyzer allows that in remote mode only (local mode runs with the GPU hidden).
    [ "$mode" = remote ] && echo "dcgm_disable: true"
    echo "run_config_search_max_concurrency: ${MA_MAX_CONCURRENCY:-8}"
    echo "run_config_search_max_instance_count: ${MA_MAX_INSTANCES:-2}"
    echo "run_config_search_max_model_batch_size: ${MA_MAX_BATCH:-8}"
    printf '%s\n' "$@"
  } > "$dir/config.yaml"
  local hide=()
  [ "$mode" = local ] && hide=(env CUDA_VISIBLE_DEVICES=)
  timeout "${MA_SECONDS:-150}" "${hide[@]}" python3 -c 'import sys; from model_analyzer.entrypoint import main; sys.argv[0] = "model-analyzer"; sys.exit(main())' \
    profile -f "$dir/config.yaml" > "$OUT/ma_$name.log" 2>&1
  echo "== model_analyzer $name ($mode): exit $?"
  grep -E "Profile complete|ERROR|Traceback|Exception" "$OUT/ma_$name.log" | head -5
  mkdir -p "$OUT/ma_$name"
  cp -r "$dir/export/results" "$dir/config.yaml" "$OUT/ma_$name/" 2>/dev/null
  # The HTML reports flattened (reports/summaries/<model>/result_summary.html ->
  # summaries_<model>_result_summary.html): the device call brings back shallow trees only.
  (cd "$dir/export/reports" 2>/dev/null && find . -name '*.html' | while read -r f; do
    cp "$f" "$OUT/ma_$name/$(echo "${f#./}" | tr / _)"; done)
  head -12 "$dir/export/results/metrics-model-inference.csv" 2>/dev/null
}
# Remote: Nereid already running, models loaded by model_analyzer through the repository API.
"$NEREID_BIN" serve --model-repository="$M" --model-control-mode=explicit --load-model=simple \
  --load-model=recommend_model --exit-on-error=false --http-port=8000 --grpc-port=8001 --metrics-port=8002 > "$OUT/nereid_remote.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
PYTHON=python3
. bench/common.sh
wait_ready http://localhost:8000/v2/health/ready 300 || { tail "$OUT/nereid_remote.log"; exit 1; }
REMOTE=("triton_http_endpoint: localhost:8000" "triton_grpc_endpoint: localhost:8001"
        "triton_metrics_url: http://localhost:8002/metrics")
RUNS=" ${MA_RUNS:-simple_remote recommend_remote simple_local} "
wanted() { [[ $RUNS == *" $1 "* ]]; }
SIMPLE=("profile_models:" "  simple:" "    cpu_only: true")
if wanted simple_remote; then ma simple_remote remote "${REMOTE[@]}" "${SIMPLE[@]}"; fi
if wanted recommend_remote; then ma recommend_remote remote "${REMOTE[@]}" "profile_models: recommend_model"; fi
kill $SERVER; wait $SERVER 2>/dev/null
# Local: model_analyzer starts and stops "tritonserver" itself.
if wanted simple_local; then
  ma simple_local local "triton_server_path: $PWD/scripts/tritonserver" "${SIMPLE[@]}"
fi
