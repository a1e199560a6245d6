#!/usr/bin/env bash
# Gathers what the device machine needs into .devcarry/ (ignored by git, named in the run's carry):
# stripped binaries, the Debian shared libraries they link, the example models, and perf_analyzer
# from PyPI (its wheel needs glibc 2.38: fine there, not here). TRITON=1 adds PyTriton's tritonserver
# with the Python backend and its bundled libraries as one xz archive (~27 MB; 115 MB unpacked is over
# what a device call carries), for the Triton comparison there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
rm -rf .devcarry && mkdir -p .devcarry/bin/backends .devcarry/lib .devcarry/models
strip -o .devcarry/bin/nereid build/nereid
strip -o .devcarry/bin/backends/libnereid_backend_native.so build/backends/libnereid_backend_native.so
# Every shared library the binaries link, except glibc's and the C++ runtime (newer on the device).
for bin in build/nereid build/backends/libnereid_backend_native.so; do
  ldd "$bin" | awk '{print $3}' | grep '^/' |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    xargs -r -I{} cp -L {} .devcarry/lib/
done
for model in ${MODELS:-simple recommend_model}; do cp -r "examples/models/$model" .devcarry/models/; done
if [ ! -x /tmp/perf_analyzer_wheel/perf_analyzer/bin/perf_analyzer ]; then
  rm -rf /tmp/perf_analyzer_wheel && mkdir -p /tmp/perf_analyzer_wheel
  .venv/bin/pip download -q --no-deps --only-binary=:all: --platform manylinux_2_38_x86_64 \
    -d /tmp/perf_analyzer_wheel perf-analyzer==2.60.0
  (cd /tmp/perf_analyzer_wheel && python3 -m zipfile -e perf_analyzer-*.whl .)
fi
# 20 MB as it is, 5 MB compressed: device_cpu_bench.sh unpacks it there.
xz -c /tmp/perf_analyzer_wheel/perf_analyzer/bin/perf_analyzer > .devcarry/perf_analyzer.xz
chmod +x .devcarry/bin/nereid
if [ -n "${TRITON:-}" ]; then
  . bench/triton_env.sh
  # The stub for the device host's Python (3.12) only, and not the 32 MB libpython 3.13 of the 3.13
  # stub: the 3.12 stub uses the host's own libpython.
  tar -C "$TRITON_SITE" -cJf .devcarry/triton.tar.xz --exclude='libpython3-*' --exclude='__pycache__' \
    --exclude='caches' --exclude='python_backend_stubs/3.[0-9]' --exclude='python_backend_stubs/3.1[013]' \
    pytriton/tritonserver nvidia_pytriton.libs
  echo "$TRITON_VERSION" > .devcarry/triton.version
fi
du -sh .devcarry
