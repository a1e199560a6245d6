#!/usr/bin/env bash
# Runs Triton's Python client example for ensembles, ensemble_image_client.py, unchanged, against
# build/nereid. Its own ensemble (preprocess_inception_ensemble: DALI or Triton's image_preprocess
# custom backend feeding Inception, whose weights come from outside PyPI) is stood in by one of the
# same shape, tests/e2e/real_models.py's preprocess_direction_ensemble: a BYTES image file -> a
# Python step decoding and resizing it -> rapidocr's text-direction CNN (real weights, ONNX
# Runtime) with a label file. Images: lines of text, upright and upside down, as PPM files; each
# run must print PASS and each image's label ("0" upright, "180" upside down). HTTP and gRPC, one
# image and a directory of them (a batch), 1 and 2 classes.
# Usage: scripts/triton_ensemble_examples.sh TRITON_CLIENT_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENT_SRC=${1:?path to a triton-inference-server/client checkout}
. scripts/triton_harness.sh
M=$WORK/models
mkdir -p "$M" "$WORK/images"
(cd tests/e2e && "$PY" - "$M" "$WORK/images" <<'PY'
import os, sys
import real_models
real_models.write_image_ensemble(sys.argv[1])
for i, text in enumerate(["HELLO", "NEREID TRITON", "THE OTHER LINE"]):
    for flipped in (False, True):
        name = f"{i}_{'down' if flipped else 'up'}.ppm"
        with open(os.path.join(sys.argv[2], name), "wb") as f:
            f.write(real_models.text_image(text, flipped))
PY
)
serve "$M" "$WORK/server.log"
example() {  # EXPECTED_LABELS ARGS...: exits 0, says PASS, and prints these top labels in order
  local want=$1 out rc=0
  shift
  out=$(timeout 120 "$PY" "$CLIENT_SRC/src/python/examples/ensemble_image_client.py" \
        -m preprocess_direction_ensemble "$@" 2>&1) || rc=$?
  echo "$out"
  local got
  got=$(awk '/^"/ {getline; getline; print $NF}' <<<"$out" | tr '\n' ' ')
  [ $rc = 0 ] && grep -q PASS <<<"$out" && [ "$got" = "$want" ] ||
    { echo "FAIL: exit status $rc, labels '$got', expected '$want'"; return 1; }
}
ALL="180 0 180 0 180 0 "  # sorted by name: 0_down, 0_up, 1_down, ...
qa_case "HTTP, one image" "$WORK/c1.log" example "0 " "$WORK/images/1_up.ppm"
qa_case "HTTP, a directory (batch of 6), 2 classes" "$WORK/c2.log" example "$ALL" -c 2 "$WORK/images"
qa_case "gRPC, one image upside down" "$WORK/c3.log" example "180 " -i grpc -u localhost:8001 \
  "$WORK/images/2_down.ppm"
qa_case "gRPC, a directory (batch of 6)" "$WORK/c4.log" example "$ALL" -i grpc -u localhost:8001 \
  "$WORK/images"
stop
echo "Triton's ensemble client example: $pass/$total passed"
