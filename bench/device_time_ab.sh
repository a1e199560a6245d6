#!/usr/bin/env bash
# A/B on the device machine: this build's native backend against another one (e.g. the commit
# before a GPU-engine change), two servers on one GPU, recommend_model KIND_GPU over HTTP at
# concurrency 1 and 64, alternating rounds. Prepare here: GPU=1 MODELS= scripts/device_carry.sh,
# then the other backend, stripped and xz-compressed, as .devcarry/old/libnereid_backend_native.so.xz
# (build it by checking out its backends/native and include/nereid/backend.h, `ninja -C build
# nereid_backend_native`, and checking them back), and onnx + protobuf + ml_dtypes wheels for the
# device's Python in .whl_min/. Run there: device run, carry [".devcarry", ".whl_min"],
# command: bash bench/device_time_ab.sh
set -uo pipefail
C=.devcarry
export LD_LIBRARY_PATH="$PWD/$C/lib:$(dirname $(find /usr/local/cuda*/ -name 'libcublasLt.so.13*' | head -1)):$LD_LIBRARY_PATH"
[ -x $C/bin/nereid ] || tar -C $C -xJf $C/bundle.tar.xz
rm -rf /tmp/oldb && cp -r $C/bin/backends /tmp/oldb && xz -dc $C/old/libnereid_backend_native.so.xz > /tmp/oldb/libnereid_backend_native.so
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site2 .whl_min/*.whl 2>/dev/null
EM=/tmp/em; rm -rf $EM; cp -r examples/models $EM; PYTHONPATH=/tmp/site2 python3 examples/generate_models.py --out $EM >/dev/null
PYTHONPATH=/tmp/site2 python3 - <<PY
import subprocess, sys
sys.path.insert(0, 'bench'); import energy_attribution as e
repo = e.repository('$EM')
B = '$PWD/$C/bin/nereid'; P = '$PWD/$C/bin/nereid-perf'
servers = {'new': e.Server(B, repo), 'old': e.Server(B, repo, '--backend-directory=/tmp/oldb')}
for c in (1, 64):
    for r in range(3):
        for who in ('old', 'new'):
            res = subprocess.run([P, '-m', 'recommend_model', '-u', f'127.0.0.1:{servers[who].http}', '--concurrency-range', str(c), '-p', '4000', '--warmup', '1000', '-q'], capture_output=True, text=True)
            line = [l for l in res.stdout.splitlines() if l.startswith('| concurrency')][-1]
            cols = [x.strip() for x in line.split('|')]
            print(f'c={c} round {r+1} {who:>4} native backend: {cols[3]:>10} infer/s, p50 {cols[4]:>6} us', flush=True)
for s in servers.values(): s.stop()
PY
