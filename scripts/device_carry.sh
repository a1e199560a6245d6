#!/usr/bin/env bash
# Gathers what the device machine needs into .devcarry/ (ignored by git, named in the run's carry):
# stripped binaries, the Debian shared libraries they link, the example models, and perf_analyzer
# from PyPI (its wheel needs glibc 2.38: fine there, not here).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
rm -rf .devcarry && mkdir -p .devcarry/bin/backends .devcarry/lib .devcarry/models
strip -o .devcarry/bin/nereid build/nereid
strip -o .devcarry/bin/backends/libnereid_backend_native.so build/backends/libnereid_backend_native.so
for lib in libprotobuf.so.32 libsimdjson.so.14 libonnx_proto.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$lib" .devcarry/lib/
done
cp -r examples/models/simple examples/models/recommend_model .devcarry/models/
if [ ! -x /tmp/perf_analyzer_wheel/perf_analyzer/bin/perf_analyzer ]; then
  rm -rf /tmp/perf_analyzer_wheel && mkdir -p /tmp/perf_analyzer_wheel
  .venv/bin/pip download -q --no-deps --only-binary=:all: --platform manylinux_2_38_x86_64 \
    -d /tmp/perf_analyzer_wheel perf-analyzer==2.60.0
  (cd /tmp/perf_analyzer_wheel && python3 -m zipfile -e perf_analyzer-*.whl .)
fi
cp /tmp/perf_analyzer_wheel/perf_analyzer/bin/perf_analyzer .devcarry/bin/
chmod +x .devcarry/bin/*
du -sh .devcarry
