#!/usr/bin/env python3
"""How long model control takes for the other models while one model is stuck, and what a client
that stops reading costs the server. One server, one run, a table:

  stuck execute():  while 'hangs' is inside an execute() that never returns, the seconds to load,
                    unload and reload 'add_sub', and the seconds the stuck model's own unload takes
                    (bounded by --model-unload-timeout-secs, then its stub is killed);
  stuck import:     while a load of a model.py blocking at import is in progress, the seconds to
                    load and unload 'add_sub', and when the stuck load fails (--model-load-timeout-secs);
  queued bodies:    ten 20 MiB load configs sent behind the stuck load: how many were refused at
                    once, and the server's RSS growth;
  unread streams:   20 gRPC streams x 500 x 64 KiB requests whose responses are never read: the
                    server's RSS growth (unbounded, it held 640 MB of responses).

  .venv/bin/python bench/isolation.py [--unload-timeout 2] [--load-timeout 4]
"""
import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

import models as test_models  # noqa: E402
from conftest import Server  # noqa: E402
from test_isolation import (BLOCKS_AT_IMPORT, HANGS, rss_mb, scalar,  # noqa: E402
                            start_big_loads, timed)
from test_python_backend import MODELS, write  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unload-timeout", type=int, default=2)
    ap.add_argument("--load-timeout", type=int, default=4)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        write(repo, "add_sub", *MODELS["add_sub"])
        write(repo, "hangs", *HANGS)
        write(repo, "blocks_at_import", *BLOCKS_AT_IMPORT)
        test_models.write_identity_models(str(repo))
        s = Server(str(repo), "--model-control-mode=explicit", "--load-model=hangs",
                   "--load-model=identity_fp32",
                   f"--model-load-timeout-secs={args.load_timeout}",
                   f"--model-unload-timeout-secs={args.unload_timeout}",
                   env={"NEREID_PYTHON": sys.executable})
        try:
            c = httpclient.InferenceServerClient(s.url, network_timeout=120)
            g = grpcclient.InferenceServerClient(s.grpc_url)
            g.async_infer("hangs", scalar(grpcclient, -1), callback=lambda result, error: None)
            time.sleep(0.5)
            rows.append(("stuck execute()", "load add_sub", timed(lambda: c.load_model("add_sub"))[0]))
            rows.append(("stuck execute()", "unload add_sub", timed(lambda: c.unload_model("add_sub"))[0]))
            rows.append(("stuck execute()", "load add_sub again", timed(lambda: c.load_model("add_sub"))[0]))
            rows.append(("stuck execute()", "unload the stuck model", timed(lambda: c.unload_model("hangs"))[0]))

            outcome = {}
            loader = threading.Thread(target=lambda: outcome.setdefault("load", timed(
                lambda: httpclient.InferenceServerClient(s.url, network_timeout=120).load_model(
                    "blocks_at_import"))))
            loader.start()
            time.sleep(0.5)
            rows.append(("stuck import", "unload add_sub", timed(lambda: c.unload_model("add_sub"))[0]))
            rows.append(("stuck import", "load add_sub", timed(lambda: c.load_model("add_sub"))[0]))
            before = rss_mb(s.proc.pid)
            threads, results = start_big_loads(s.url, "blocks_at_import")
            time.sleep(2)
            grown = rss_mb(s.proc.pid) - before
            for t in threads:
                t.join()
            loader.join()
            refused = sum("too many model control requests" in r[1] for r in results)
            rows.append(("stuck import", "its load fails after", outcome["load"][0]))
            rows.append(("queued bodies", "10 x 20 MiB configs: refused at once", refused))
            rows.append(("queued bodies", "RSS growth while they wait (MB)", grown))

        finally:
            s.stop()
        # A server of its own, so that memory the phases above freed does not hide this growth.
        s = Server(str(repo), "--model-control-mode=explicit", "--load-model=identity_fp32")
        try:
            import grpc
            from tritonclient.grpc import service_pb2, service_pb2_grpc

            def request(i):
                r = service_pb2.ModelInferRequest(model_name="identity_fp32", id=str(i))
                r.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16384])
                r.raw_input_contents.append(np.full(16384, i, np.float32).tobytes())
                return r
            before = rss_mb(s.proc.pid)
            calls, channels = [], []
            for _ in range(20):
                channel = grpc.insecure_channel(s.grpc_url)
                calls.append(service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(
                    request(i) for i in range(500)))
                channels.append(channel)
            time.sleep(8)
            rows.append(("unread streams", "20 x 500 x 64 KiB: RSS growth (MB)",
                         rss_mb(s.proc.pid) - before))
            for call in calls:
                call.cancel()
            for channel in channels:
                channel.close()
        finally:
            s.stop()
    print(f"{'case':<16} {'what':<40} {'value':>8}")
    for case, what, value in rows:
        print(f"{case:<16} {what:<40} {value:>8.2f}" if isinstance(value, float)
              else f"{case:<16} {what:<40} {value:>8}")


if __name__ == "__main__":
    main()
