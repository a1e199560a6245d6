"""Writes the seed corpus of server_fuzz (tests/fuzz/corpus/server_fuzz): valid requests for each
route and transport, and each hostile input found in review (issue 8) as a replayed case.
Run with the venv's Python: .venv/bin/python tests/fuzz/make_server_seeds.py"""
import json
import os
import struct

from tritonclient.grpc import service_pb2 as pb

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "server_fuzz")
HTTP, UNARY, STREAM = b"\x00", b"\x01", b"\x02"


def http(method, path, body=b"", headers=()):
    head = [f"{method} {path} HTTP/1.1", "Host: fuzz"] + list(headers)
    if body or method == "POST":
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def infer_json(model, inputs, outputs=None, binary=b""):
    doc = {"inputs": inputs}
    if outputs:
        doc["outputs"] = outputs
    header = json.dumps(doc).encode()
    extra = [f"Inference-Header-Content-Length: {len(header)}"] if binary else []
    return http("POST", f"/v2/models/{model}/infer", header + binary,
                extra + ["Content-Type: application/octet-stream" if binary else "Content-Type: application/json"])


def ints(values):
    return struct.pack(f"<{len(values)}i", *values)


def grpc_request(model, shapes, raw=None, contents=True, outputs=()):
    r = pb.ModelInferRequest(model_name=model)
    for name, shape in shapes:
        t = r.inputs.add(name=name, datatype="INT32", shape=shape)
        if raw is None and contents:
            n = 1
            for d in shape:
                n *= d
            t.contents.int_contents.extend(range(n))
    if raw is not None:
        r.raw_input_contents.extend(raw)
    for o in outputs:
        r.outputs.add(name=o)
    return r.SerializeToString()


def seeds():
    a = {"name": "A", "shape": [1, 4], "datatype": "INT32", "data": [1, 2, 3, 4]}
    b = {"name": "B", "shape": [1, 4], "datatype": "INT32", "data": [5, 6, 7, 8]}
    yield "http_json_infer", HTTP + infer_json("add", [a, b])
    yield "http_binary_infer", HTTP + infer_json(
        "add", [{"name": "A", "shape": [2, 4], "datatype": "INT32", "parameters": {"binary_data_size": 32}},
                {"name": "B", "shape": [2, 4], "datatype": "INT32", "parameters": {"binary_data_size": 32}}],
        [{"name": "OUT", "parameters": {"binary_data": True}}], ints(range(8)) + ints(range(8)))
    yield "http_classification", HTTP + infer_json(
        "add_default", [{"name": "A", "shape": [1, 4], "datatype": "INT32", "data": [1, 2, 3, 4]}],
        [{"name": "OUT", "parameters": {"classification": 2}}])
    yield "http_reshape", HTTP + infer_json(
        "add_reshape", [{"name": "A", "shape": [2, 2], "datatype": "INT32", "data": [1, 2, 3, 4]},
                        {"name": "B", "shape": [1, 4], "datatype": "INT32", "data": [1, 1, 1, 1]}])
    yield "http_metadata_pipelined", HTTP + b"".join(
        http("GET", p) for p in ("/v2", "/v2/models/add", "/v2/models/add/config", "/v2/models/stats",
                                 "/v2/health/ready", "/v2/models/add/versions/1/ready"))
    yield "http_repository", HTTP + http("POST", "/v2/repository/index", b"{}") + http(
        "POST", "/v2/repository/models/add_reshape/load", b"{}")
    yield "http_chunked", HTTP + (b"POST /v2/models/add/infer HTTP/1.1\r\nHost: f\r\nTransfer-Encoding: chunked\r\n\r\n"
                                  + b"%x\r\n" % len(json.dumps({"inputs": [a, b]}))
                                  + json.dumps({"inputs": [a, b]}).encode() + b"\r\n0\r\n\r\n")
    yield "http_gzip", HTTP + http("POST", "/v2/models/add/infer", b"\x1f\x8b\x08\x00garbage",
                                   ["Content-Encoding: gzip"])
    # Finding 1: a header field of 64 KiB or more (Beast's 16-bit length), and as a chunked trailer.
    yield "finding1_huge_header", HTTP + http("GET", "/v2/health/live", headers=["X-Big: " + "a" * 70000])
    yield "finding1_huge_trailer", HTTP + (
        b"POST /v2/models/add/infer HTTP/1.1\r\nHost: f\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\nX-Trailer: " + b"b" * 70000 + b"\r\n\r\n")
    # Finding 2: an element count that overflows 64 bits with an empty binary tensor.
    yield "finding2_overflow_shape", HTTP + infer_json(
        "add_reshape", [{"name": "A", "shape": [2, 2], "datatype": "INT32", "data": [1, 2, 3, 4]},
                        {"name": "B", "shape": [4503599627370496, 4], "datatype": "INT32",
                         "parameters": {"binary_data_size": 0}}], binary=b"\x00")
    # Finding 4 and 7: a config override naming a file outside the model, on a serving model.
    yield "finding4_label_escape", HTTP + http("POST", "/v2/repository/models/add/load", json.dumps(
        {"parameters": {"config": json.dumps({"name": "add", "backend": "native", "max_batch_size": 8,
                                              "input": [{"name": "A", "data_type": "TYPE_INT32", "dims": [4]},
                                                        {"name": "B", "data_type": "TYPE_INT32", "dims": [4]}],
                                              "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [4],
                                                          "label_filename": "/etc/passwd"}]})}}).encode())
    # Finding 5: a reshape larger than what was sent.
    yield "finding5_short_tensor", HTTP + infer_json(
        "add_reshape", [{"name": "A", "shape": [2, 2], "datatype": "INT32", "parameters": {"binary_data_size": 4}},
                        {"name": "B", "shape": [1, 4], "datatype": "INT32", "data": [1, 1, 1, 1]}],
        binary=ints([1]))
    # Finding 8: a Content-Length that never arrives.
    yield "finding8_short_body", HTTP + b"POST /v2/models/add/infer HTTP/1.1\r\nHost: f\r\nContent-Length: 66000000\r\n\r\n{"
    yield "grpc_infer", UNARY + grpc_request("add", [("A", [1, 4]), ("B", [1, 4])])
    yield "grpc_raw_infer", UNARY + grpc_request("add", [("A", [2, 4]), ("B", [2, 4])],
                                                 raw=[ints(range(8)), ints(range(8))], outputs=["OUT"])
    yield "finding2_grpc_overflow", UNARY + grpc_request(
        "add_reshape", [("A", [2, 2]), ("B", [4503599627370496, 4])], raw=[ints([1, 2, 3, 4]), b""])
    yield "finding9_grpc_garbage", UNARY + b"\x0a\xff\xff\xff\xff\x0f garbage"
    valid = grpc_request("add_default", [("A", [1, 4])])
    assert b"\xff" not in valid
    yield "finding9_stream_garbage_then_valid", STREAM + b"\x12\x99garbage\xff" + valid + b"\xff" + valid
    yield "grpc_stream", STREAM + grpc_request("add", [("A", [1, 4]), ("B", [1, 4])])


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
