"""The gRPC frontend through the real tritonclient.grpc: every RPC, every datatype, typed contents,
sync/async/streaming inference, and the bad-input cases, each followed by a good request."""
import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from models import DATATYPES, identity_name
from test_infer import sample


@pytest.fixture()
def gclient(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


def simple_inputs(a, b):
    ins = [grpcclient.InferInput("INPUT0", list(a.shape), "INT32"),
           grpcclient.InferInput("INPUT1", list(b.shape), "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins


def assert_simple_works(c):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    r = c.infer("simple", simple_inputs(a, a))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)


def test_health_and_metadata(gclient):
    assert gclient.is_server_live() and gclient.is_server_ready()
    assert gclient.is_model_ready("simple") and not gclient.is_model_ready("nope")
    assert not gclient.is_model_ready("simple", "7")
    md = gclient.get_server_metadata()
    assert md.name == "nereid" and "statistics" in md.extensions
    mm = gclient.get_model_metadata("simple")
    assert mm.platform == "onnxruntime_onnx" and list(mm.inputs[0].shape) == [-1, 16]
    cfg = gclient.get_model_config("recommend_model").config
    assert cfg.max_batch_size == 32 and list(cfg.dynamic_batching.preferred_batch_size) == [8, 16, 32]


def test_grpc_health_service(server):
    # grpc.health.v1.Health/Check with an empty HealthCheckRequest; SERVING is status 1 (field 1).
    channel = grpc.insecure_channel(server.grpc_url)
    check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    assert check(b"", timeout=10) == b"\x08\x01"
    channel.close()


def test_infer_simple_and_classification(gclient):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    r = gclient.infer("simple", simple_inputs(a, b), request_id="g1")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert r.get_response().id == "g1"
    x = np.random.default_rng(0).standard_normal((2, 1024)).astype(np.float32)
    i = grpcclient.InferInput("input__0", [2, 1024], "FP32")
    i.set_data_from_numpy(x)
    top = gclient.infer("recommend_model", [i],
                        outputs=[grpcclient.InferRequestedOutput("output__0", class_count=3)])
    assert top.as_numpy("output__0").shape == (2, 3)
    assert top.as_numpy("output__0")[0][0].decode().count(":") == 2


@pytest.mark.parametrize("datatype", sorted(DATATYPES))
def test_every_datatype_round_trips(gclient, datatype):
    data = sample(datatype, (2, 5))
    i = grpcclient.InferInput("INPUT0", [2, 5], datatype)
    i.set_data_from_numpy(data)
    out = gclient.infer(identity_name(datatype), [i]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, data)


def test_typed_contents_instead_of_raw(server):
    """A hand-built request with InferTensorContents (what non-Python clients often send)."""
    channel = grpc.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    req = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(range(16))
    resp = stub.ModelInfer(req)
    out = np.frombuffer(resp.raw_output_contents[0], dtype=np.int32)
    np.testing.assert_array_equal(out, 2 * np.arange(16))
    bad = service_pb2.ModelInferRequest(model_name="identity_fp16")
    bad.inputs.add(name="INPUT0", datatype="FP16", shape=[1, 1]).contents.fp32_contents.append(1.0)
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(bad)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents" in e.value.details()
    # Raw bytes for one input beside contents for both, as Triton's grpc_explicit_int_content_client
    # sends them: Triton's message, before any count of raw_input_contents.
    req.raw_input_contents.append(np.arange(8, dtype=np.int32).tobytes())
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ("contents field must not be specified when using raw_input_contents for 'INPUT0' for "
            "model 'simple'") in e.value.details()
    channel.close()


def test_async_infer_many_in_flight(gclient):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    done = queue.Queue()
    for k in range(64):
        gclient.async_infer("simple", simple_inputs(a + k, a), callback=lambda result, error, k=k: done.put((k, result, error)),
                            request_id=str(k))
    for _ in range(64):
        k, r, e = done.get(timeout=30)
        assert e is None, e
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a + k)


def test_streaming_with_errors_in_error_message(gclient):
    results = queue.Queue()
    gclient.start_stream(callback=lambda result, error: results.put((result, error)))
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for k in range(10):
        gclient.async_stream_infer("simple", simple_inputs(a + k, a), request_id=str(k))
    gclient.async_stream_infer("nope", simple_inputs(a, a), request_id="bad-model")
    gclient.async_stream_infer("simple", simple_inputs(a[:, :8], a[:, :8]), request_id="bad-shape")
    got = [results.get(timeout=30) for _ in range(12)]
    gclient.stop_stream()
    ok = {r.get_response().id: r for r, e in got if e is None}
    errors = [str(e) for r, e in got if e is not None]
    assert sorted(ok) == sorted(str(k) for k in range(10))
    for k in range(10):
        np.testing.assert_array_equal(ok[str(k)].as_numpy("OUTPUT0"), 2 * a + k)
    assert any("unknown model" in e for e in errors) and any("unexpected shape" in e for e in errors)
    assert_simple_works(gclient)


def test_statistics_index_logging_and_unimplemented(gclient):
    assert_simple_works(gclient)
    stats = gclient.get_inference_statistics("simple").model_stats[0]
    assert stats.inference_count >= 1 and stats.inference_stats.success.count >= 1
    names = {m.name for m in gclient.get_model_repository_index().models}
    assert {"simple", "recommend_model"} <= names
    settings = gclient.update_log_settings({"log_verbose_level": 0})
    assert settings.settings["log_info"].bool_param is True
    assert list(gclient.get_cuda_shared_memory_status().regions) == []
    # No --trace-config: tracing off, Triton's defaults (docs/tracing.md).
    trace = gclient.get_trace_settings().settings
    assert trace["trace_level"].value == ["OFF"] and trace["trace_rate"].value == ["1000"]
    with pytest.raises(InferenceServerException, match="EXPLICIT"):
        gclient.load_model("simple")


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(gclient, algorithm):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    r = gclient.infer("simple", simple_inputs(a, a), compression_algorithm=algorithm)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)


def test_large_message_beyond_grpc_default_limit(gclient):
    # 64 x 1024 x 1024 FP32 = 256 MiB would be slow here; 8 MiB already exceeds gRPC's 4 MiB default.
    x = np.ones((2048, 1024), dtype=np.float32)
    i = grpcclient.InferInput("input__0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    out = gclient.infer("matmul_model", [i]).as_numpy("output__0")
    assert out.shape == (2048, 1024)


@pytest.mark.parametrize("case,fragment", [
    ("raw_too_short", "bytes of data"),
    ("raw_missing", "unable to find data for input tensor 'INPUT1' for model 'simple' in request."),
    ("raw_extra", "the request has 3 raw_input_contents but only 2 of its inputs take raw data"),
    ("bytes_truncated", "malformed BYTES"),
    ("unknown_datatype", "unknown datatype"),
    ("bad_version", "failed to get model version from specified version string 'x1'"),
])
def test_malformed_raw_requests(server, gclient, case, fragment):
    channel = grpc.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    req = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        req.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
    if case == "raw_too_short":
        req.raw_input_contents[1] = req.raw_input_contents[1][:10]
    elif case == "raw_missing":
        del req.raw_input_contents[1]
    elif case == "raw_extra":
        req.raw_input_contents.append(b"")
    elif case == "bytes_truncated":
        req = service_pb2.ModelInferRequest(model_name="identity_bytes")
        req.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 1])
        req.raw_input_contents.append(b"\x10\x00\x00\x00abc")  # says 16 bytes, has 3
    elif case == "unknown_datatype":
        req.inputs[0].datatype = "INT33"
    elif case == "bad_version":
        req.model_version = "x1"
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in e.value.details(), e.value.details()
    channel.close()
    assert_simple_works(gclient)


def test_bad_log_settings_are_rejected(server, gclient):
    with pytest.raises(InferenceServerException, match="'log_file' can not be changed"):
        gclient.update_log_settings({"log_file": "/tmp/x.log"})
    # A value of the wrong type (tritonclient types values by key, so the raw stub sends it).
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
    request = service_pb2.LogSettingsRequest()
    request.settings["log_info"].string_param = "yes"
    with pytest.raises(grpc.RpcError) as e:
        stub.LogSettings(request)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "mistyped logging setting 'log_info'" in e.value.details()
    settings = gclient.get_log_settings().settings
    assert settings["log_info"].bool_param is True and settings["log_file"].string_param == ""
