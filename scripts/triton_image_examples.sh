#!/usr/bin/env bash
# Runs Triton's image classification client examples, unchanged, against build/nereid serving a
# ResNet-50 (torchvision's architecture, scripts/vision_models.py, random weights) with an ONNX
# Runtime config on the native engine (--onnx-engine=auto): image_client.py over HTTP and gRPC
# (INCEPTION and VGG scaling, batch 1 and 2), grpc_image_client.py, and ensemble_image_client.py
# over both protocols against preprocess_inception_ensemble, a Python step that decodes the image
# file with Pillow, resizes it to 224x224 and scales it as INCEPTION does, then the ResNet-50. The
# examples need Pillow and attrdict (image_client.py over HTTP); this installs them into the
# checkout's venv where missing. Prints pass/total.
# KIND=KIND_GPU serves the ResNet-50 on GPU 0 instead (the native GPU engine; on the device
# machine through scripts/gpu_device_run.sh, section "images").
# Usage: scripts/triton_image_examples.sh TRITON_CLIENT_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENT_SRC=${1:?path to a triton-inference-server/client checkout}
. scripts/triton_harness.sh
"$PY" -c "import PIL, attrdict" 2>/dev/null || "$PY" -m pip install -q pillow attrdict >/dev/null
M=$WORK/models
mkdir -p "$M/resnet50/1" "$M/preprocess/1" "$M/preprocess_inception_ensemble/1"
"$PY" scripts/vision_models.py "$WORK/built" --models resnet50 >/dev/null
mv "$WORK/built/resnet50.onnx" "$M/resnet50/1/model.onnx"
"$PY" -c "print('\n'.join(f'class_{i}' for i in range(1000)))" >"$M/resnet50/labels.txt"
cp "$M/resnet50/labels.txt" "$M/preprocess_inception_ensemble/labels.txt"
cat >"$M/resnet50/config.pbtxt" <<CFG
name: "resnet50"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] label_filename: "labels.txt" } ]
instance_group [ { kind: ${KIND:-KIND_CPU} count: 1 } ]
dynamic_batching { }
CFG
cat >"$M/preprocess/config.pbtxt" <<'CFG'
name: "preprocess"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
CFG
cat >"$M/preprocess/1/model.py" <<'PYTHON'
import io

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            files = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            try:
                images = [Image.open(io.BytesIO(bytes(f[0]))).convert("RGB").resize((224, 224))
                          for f in files]
            except OSError as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
                continue
            pixels = np.stack([np.asarray(i, np.float32).transpose(2, 0, 1) / 127.5 - 1
                               for i in images])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", pixels)]))
        return responses
PYTHON
cat >"$M/preprocess_inception_ensemble/config.pbtxt" <<'CFG'
name: "preprocess_inception_ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1000 ] label_filename: "labels.txt" } ]
ensemble_scheduling {
  step [
    { model_name: "preprocess" model_version: -1
      input_map { key: "INPUT" value: "INPUT" } output_map { key: "OUTPUT" value: "pixels" } },
    { model_name: "resnet50" model_version: -1
      input_map { key: "input" value: "pixels" } output_map { key: "output" value: "OUTPUT" } }
  ]
}
CFG
IMAGES=$WORK/images
mkdir -p "$IMAGES"
"$PY" -c "
from PIL import Image; import numpy as np
rng = np.random.default_rng(0)
for n in ('a', 'b'):
    Image.fromarray(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)).save('$IMAGES/' + n + '.jpg')"
EX=$CLIENT_SRC/src/python/examples
serve "$M" "$WORK/server.log" --onnx-engine=auto
grep -q "model 'resnet50' (configured for onnxruntime) runs on the native engine" "$WORK/server.log" ||
  { echo "resnet50 is not on the native engine"; tail -5 "$WORK/server.log"; exit 1; }
if [ "${KIND:-}" = KIND_GPU ]; then
  grep -q "model 'resnet50' on GPU 0: native GPU engine" "$WORK/server.log" ||
    { echo "resnet50 is not on the native GPU engine"; tail -5 "$WORK/server.log"; exit 1; }
fi
qa_case "image_client.py http INCEPTION" "$WORK/c1.log" example image_client.py -m resnet50 -c 3 -s INCEPTION "$IMAGES/a.jpg"
qa_case "image_client.py grpc VGG batch 2" "$WORK/c2.log" example image_client.py -i grpc -u localhost:8001 -m resnet50 -c 2 -s VGG -b 2 "$IMAGES"
qa_case "grpc_image_client.py" "$WORK/c3.log" example grpc_image_client.py -m resnet50 -c 2 -s INCEPTION "$IMAGES/b.jpg"
qa_case "ensemble_image_client.py http" "$WORK/c4.log" example ensemble_image_client.py -c 3 "$IMAGES/a.jpg"
qa_case "ensemble_image_client.py grpc" "$WORK/c5.log" example ensemble_image_client.py -i grpc -u localhost:8001 -c 3 "$IMAGES"
stop
echo "Triton's image examples: $pass of $total passed"
[ "$pass" = "$total" ]
