# Sourced by the benchmark scripts: a free local port and waiting for a server to be ready.
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
