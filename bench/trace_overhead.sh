#!/usr/bin/env bash
# Tracing's cost per request: no tracing, every request traced to Triton's trace file, every
# request exported as OpenTelemetry spans to a local OTLP/HTTP receiver (Python's http.server
# answering 200), and OpenTelemetry mode with rate=0 (only requests with a traceparent are traced;
# nereid-perf sends none). `simple` over HTTP and gRPC at concurrency 1 and 16, alternating rounds.
# Usage: bench/trace_overhead.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=.venv/bin/python
. bench/common.sh
DIR=$(mktemp -d)
OTLP=$(free_port)
"$PYTHON" - "$OTLP" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
RECEIVER=$!
trap 'kill $RECEIVER 2>/dev/null; rm -rf "$DIR"' EXIT
OTEL="--trace-config=mode=opentelemetry --trace-config=level=TIMESTAMPS \
--trace-config=opentelemetry,url=http://127.0.0.1:$OTLP/v1/traces --trace-config=opentelemetry,bsp_schedule_delay=200"
PROTOS=${PROTOS:-"http grpc"} CONCS=${CONCS:-"1 16"} bench/flags_overhead.sh off= \
  file="--trace-config=triton,file=$DIR/trace.json --trace-config=level=TIMESTAMPS --trace-config=rate=1 --trace-config=triton,log-frequency=1000" \
  otel="$OTEL --trace-config=rate=1" otel_r0="$OTEL --trace-config=rate=0"
