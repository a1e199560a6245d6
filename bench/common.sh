# Sourced by the benchmark scripts: a free local port, waiting for a server to be ready, two
# nereid binaries started side by side for an A/B, Triton's Python backend laid out for a run, and
# a model's response-cache statistics.
# Needs PYTHON (any interpreter with the standard library: the venv's here, python3 on the device).
free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# wait_ready URL [TRIES]: polls URL every 0.1 s until it answers 200 (default 300 tries); 1 if never.
wait_ready() {
  for _ in $(seq "${2:-300}"); do
    "$PYTHON" -c "import urllib.request as u; u.urlopen('$1')" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
# ab_pair BASELINE CANDIDATE REPO [SERVER_ARGS...]: both binaries serving REPO on free ports,
# ready; sets PA HA GA (the baseline's pid, HTTP and gRPC ports) and PB HB GB, logs
# REPO/baseline.log and REPO/candidate.log, and stops both and removes REPO at exit. Both load the
# venv's ONNX Runtime (NEREID_ONNXRUNTIME_LIBRARY): a baseline built in a fresh worktree has no
# build/backends/onnxruntime link to it, and would otherwise serve `simple` on the native engine
# instead (not the same model run at all).
ab_pair() {
  local base=$1 cand=$2 repo=$3
  shift 3
  local ort
  ort=$(ls "$PWD"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* | head -1)
  export NEREID_ONNXRUNTIME_LIBRARY=${NEREID_ONNXRUNTIME_LIBRARY:-$ort}
  HA=$(free_port); GA=$(free_port); HB=$(free_port); GB=$(free_port)
  "$base" serve --model-repository="$repo" --http-port="$HA" --grpc-port="$GA" \
    --allow-metrics=false "$@" >"$repo/baseline.log" 2>&1 &
  PA=$!
  "$cand" serve --model-repository="$repo" --http-port="$HB" --grpc-port="$GB" \
    --allow-metrics=false "$@" >"$repo/candidate.log" 2>&1 &
  PB=$!
  # shellcheck disable=SC2064  # (the pids and folder now)
  trap "kill $PA $PB 2>/dev/null; wait 2>/dev/null || true; rm -rf '$repo'" EXIT
  wait_ready "http://localhost:$HA/v2/health/ready"
  wait_ready "http://localhost:$HB/v2/health/ready"
}
# triton_python_backend DIR: Triton's Python backend from TRITON_HOME into DIR/python, with the
# stub built for PYVER (the system Python's version: the stub embeds its libpython).
triton_python_backend() {
  cp -r "$TRITON_HOME/backends/python" "$1/python"
  cp "$TRITON_HOME/python_backend_stubs/$PYVER/triton_python_backend_stub" "$1/python/"
}
# cache_stats URL MODEL LABEL: the model's cache hits and misses from the statistics extension.
cache_stats() {
  curl -s "$1/v2/models/$2/stats" | "$PYTHON" -c '
import json, sys
s = json.load(sys.stdin)["model_stats"][0]["inference_stats"]
h, m = s["cache_hit"], s["cache_miss"]
print("%s: %d hits, mean lookup %.1f us; %d misses, mean lookup + insert %.1f us"
      % (sys.argv[1], h["count"], h["ns"] / max(h["count"], 1) / 1e3, m["count"],
         m["ns"] / max(m["count"], 1) / 1e3))' "$3"
}
