"""`nereid-perf` against the real server: both protocols, both load modes, CSV and JSON outputs."""
import csv
import os
import json
import subprocess

import pytest

from conftest import BINARY

PERF = os.path.join(os.path.dirname(BINARY), "nereid-perf")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrency_sweep_writes_table_csv_and_json(server, tmp_path, protocol):
    url = server.url if protocol == "http" else server.grpc_url
    out = subprocess.run(
        [PERF, "-m", "simple", "-i", protocol, "-u", url, "--concurrency-range", "1:2:x2",
         "-p", "300", "--warmup", "100", "-f", str(tmp_path / "r.csv"), "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "| concurrency  |          1 |" in out.stdout and "concurrency 2:" in out.stderr
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert [r["Concurrency"] for r in rows] == ["1", "2"]
    assert all(float(r["Inferences/Second"]) > 0 and r["Errors"] == "0" for r in rows)
    # The server's own view of each window, from the statistics extension over the same protocol:
    # simple is not batched, so one request per execution, and its compute time is measured. (An
    # execution and its request's success are counted one after the other, as Triton counts
    # them: a window's edge can fall between the two, so the ratio of its thousands of requests
    # to its executions is 1 within one in a hundred, not always exactly; seen under the
    # full suite's load.)
    assert all(abs(float(r["Server Batch Size"]) - 1.0) < 2e-2 and
               float(r["Server Compute Infer"]) > 0 for r in rows)
    results = json.load(open(tmp_path / "r.json"))["results"]
    assert results[0]["count"] > 0 and results[0]["p99_us"] >= results[0]["p50_us"] > 0
    assert abs(results[0]["server_batch_size"] - 1.0) < 2e-2


def test_server_batch_size_shows_dynamic_batching(server, tmp_path):
    # recommend_model batches (max_queue_delay 200 us, preferred sizes 8/16/32): at concurrency 16
    # the server executes several requests at a time, which the batch column must show.
    out = subprocess.run(
        [PERF, "-m", "recommend_model", "-u", server.url, "--concurrency-range", "16",
         "-p", "1500", "--warmup", "300", "-q", "-f", str(tmp_path / "r.csv")],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    row = list(csv.DictReader(open(tmp_path / "r.csv")))[0]
    assert float(row["Server Batch Size"]) > 1.5, row


def test_energy_columns_from_the_metrics_port(repository, tmp_path):
    """--metrics-url adds the server's watts, the model's mJ/inference and inferences/J, and its
    gCO2e per 1,000 inferences (here from the CPU estimate and a fixed intensity)."""
    from conftest import Server
    s = Server(repository, "--carbon-intensity=400")
    try:
        out = subprocess.run(
            [PERF, "-m", "simple", "-u", s.url, "--metrics-url", f"127.0.0.1:{s.metrics_port}",
             "--concurrency-range", "2", "-p", "1500", "--warmup", "500", "-q",
             "-f", str(tmp_path / "r.csv"), "--json", str(tmp_path / "r.json")],
            capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "mJ/inf" in out.stdout and "gCO2e/1k" in out.stdout, out.stdout
        result = json.load(open(tmp_path / "r.json"))["results"][0]
        assert result["watts"] > 0 and result["mj_per_inference"] > 0, result
        assert abs(result["inferences_per_joule"] * result["mj_per_inference"] - 1e3) < 1e-6 * 1e3
        # grams per 1,000 = J per inference x 1,000 / 3.6e6 x 400 g/kWh (PUE 1)
        expected = result["mj_per_inference"] / 1e3 * 1e3 / 3.6e6 * 400
        assert abs(result["grams_co2e_per_1000"] - expected) <= 1e-6 * expected, result
        row = list(csv.DictReader(open(tmp_path / "r.csv")))[0]
        assert float(row["mJ/Inference"]) == pytest.approx(result["mj_per_inference"], rel=1e-5)  # 6 digits
    finally:
        assert s.stop() == 0


def test_request_rate_mode_holds_the_rate(server):
    out = subprocess.run(
        [PERF, "-m", "simple", "-u", server.url, "--request-rate-range", "200",
         "--request-distribution", "poisson", "-p", "1000", "--warmup", "200", "-q"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    row = [line for line in out.stdout.splitlines() if "request_rate" in line][0]
    throughput = float(row.split("|")[3])
    assert 120 < throughput < 300  # Poisson arrivals around 200/s over one second


def test_unknown_model_fails_cleanly(server):
    out = subprocess.run([PERF, "-m", "nope", "-u", server.url, "-p", "100"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "cannot read the metadata of model 'nope'" in out.stderr
