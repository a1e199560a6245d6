"""Energy accounting on the real binary: on a machine without a meter every model has energy series
labelled source="estimate", the parts add up to the meter's figure, requests that ask get their
energy (HTTP, gRPC, a gRPC stream), the statistics extension and the J/inference histogram carry
it, carbon follows a flag or a file, and the flag turns it all off."""
import queue
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import Server, simple_inputs


def metrics(server):
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
    rows = {}
    for line in text.splitlines():
        if line.startswith(("nereid_energy", "nereid_carbon", "nereid_pue")):
            key, value = line.rsplit(" ", 1)
            rows[key] = float(value)
    return rows


def infer_simple(client, n):
    inputs = simple_inputs(httpclient)
    for _ in range(n):
        client.infer("simple", inputs)


def test_energy_is_attributed_and_conserved(repository):
    s = Server(repository)
    try:
        client = httpclient.InferenceServerClient(s.url)
        infer_simple(client, 300)
        time.sleep(0.8)  # past the attribution lag
        m = metrics(s)
        scopes = {k.split('scope="')[1].split('"')[0] for k in m if 'scope="' in k}
        assert scopes, m
        for scope in scopes:
            metered = m[f'nereid_energy_metered_joules_total{{scope="{scope}",source="estimate"}}']
            parts = m[f'nereid_energy_unattributed_idle_joules_total{{scope="{scope}",source="estimate"}}']
            parts += sum(v for k, v in m.items()
                         if k.startswith("nereid_energy_joules_total") and f'scope="{scope}"' in k)
            assert abs(parts - metered) <= 1e-6 * max(1.0, metered), (scope, parts, metered)
        key = 'model="simple",version="1",scope="process-cpu",source="estimate"'
        assert m[f"nereid_energy_inferences_total{{{key}}}"] == 300
        assert m[f'nereid_energy_joules_total{{{key},kind="active"}}'] > 0
        assert m[f'nereid_energy_joules_total{{{key},kind="idle"}}'] == 0  # an estimate has no floor
        assert "energy: scope process-cpu measured by estimate" in s.read_log()
    finally:
        assert s.stop() == 0


def test_carbon_from_a_flag_and_a_file(repository, tmp_path):
    intensity = tmp_path / "grid.csv"
    intensity.write_text("# unix seconds, g CO2e per kWh\n0,500\n")
    s = Server(repository, "--carbon-intensity-file=" + str(intensity), "--pue=1.2")
    try:
        infer_simple(httpclient.InferenceServerClient(s.url), 100)
        time.sleep(0.8)
        m = metrics(s)
        assert m["nereid_carbon_intensity_grams_per_kwh"] == 500
        assert m["nereid_pue"] == 1.2
        key = 'model="simple",version="1",scope="process-cpu",source="estimate"'
        joules = m[f'nereid_energy_joules_total{{{key},kind="active"}}']
        grams = m[f"nereid_carbon_grams_total{{{key}}}"]
        assert joules > 0 and abs(grams - joules / 3.6e6 * 500 * 1.2) <= 1e-9 + 1e-6 * grams
    finally:
        assert s.stop() == 0
    s = Server(repository)  # no intensity given: no carbon figures
    try:
        assert not any(k.startswith("nereid_carbon") for k in metrics(s))
    finally:
        assert s.stop() == 0


def test_energy_accounting_can_be_turned_off(repository):
    s = Server(repository, "--energy-accounting=false")
    try:
        infer_simple(httpclient.InferenceServerClient(s.url), 10)
        assert metrics(s) == {}
    finally:
        assert s.stop() == 0


def test_a_request_that_asks_gets_its_energy_over_http_grpc_and_a_stream(repository):
    s = Server(repository, "--carbon-intensity=400")
    try:
        http = httpclient.InferenceServerClient(s.url)
        infer_simple(http, 200)
        time.sleep(0.8)  # the ledger has fitted the model's power by now
        r = http.infer("simple", simple_inputs(httpclient), parameters={"nereid.energy": True})
        p = r.get_response()["parameters"]
        assert p["energy_source"] == "estimate" and p["energy_scope"] == "process-cpu", p
        assert p["energy_joules"] > 0
        assert abs(p["carbon_grams"] - p["energy_joules"] / 3.6e6 * 400) <= 1e-12 + 1e-9 * p["carbon_grams"]
        assert (r.as_numpy("OUTPUT0") == 2 * np.arange(16)).all()
        # Not asked: nothing added.
        assert "parameters" not in http.infer("simple", simple_inputs(httpclient)).get_response()
        with pytest.raises(InferenceServerException, match="parameter 'nereid.energy' must be a boolean"):
            http.infer("simple", simple_inputs(httpclient), parameters={"nereid.energy": "yes"})

        grpc = grpcclient.InferenceServerClient(s.grpc_url)
        r = grpc.infer("simple", simple_inputs(grpcclient), parameters={"nereid.energy": True})
        gp = r.get_response().parameters
        assert gp["energy_joules"].double_param > 0 and gp["energy_source"].string_param == "estimate"
        assert gp["carbon_grams"].double_param > 0
        with pytest.raises(InferenceServerException, match="must be a boolean"):
            grpc.infer("simple", simple_inputs(grpcclient), parameters={"nereid.energy": 1})

        results = queue.Queue()
        grpc.start_stream(callback=lambda result, error: results.put((result, error)))
        for _ in range(3):
            grpc.async_stream_infer("simple", simple_inputs(grpcclient),
                                    parameters={"nereid.energy": True})
        for _ in range(3):
            result, error = results.get(timeout=10)
            assert error is None, error
            assert result.get_response().parameters["energy_joules"].double_param > 0
        grpc.stop_stream()
        grpc.close()
    finally:
        assert s.stop() == 0


def test_statistics_and_the_histogram_carry_energy(repository):
    s = Server(repository)
    try:
        http = httpclient.InferenceServerClient(s.url)
        infer_simple(http, 150)
        time.sleep(0.8)
        stats = http.get_inference_statistics("simple")["model_stats"][0]
        (e,) = stats["energy"]
        assert e["scope"] == "process-cpu" and e["source"] == "estimate", e
        assert e["inferences"] == 150 and e["active_joules"] > 0 and e["idle_joules"] == 0
        assert e["idle_share"] == 0 and e["active_watts"] > 0 and "carbon_grams" not in e
        m = metrics(s)
        key = 'model="simple",version="1",scope="process-cpu",source="estimate"'
        count = m[f"nereid_energy_joules_per_inference_count{{{key}}}"]
        total = m[f"nereid_energy_joules_per_inference_sum{{{key}}}"]
        assert count == 150 and m[f'nereid_energy_joules_per_inference_bucket{{{key},le="+Inf"}}'] == 150
        assert abs(e["joules_per_inference"] - total / count) <= 1e-9 * total
        # Every finished batch is in the sum: all of the model's attributed joules.
        attributed = m[f'nereid_energy_joules_total{{{key},kind="active"}}']
        assert abs(total - attributed) <= 1e-6 * attributed
        # Triton's gRPC client reads the statistics message, skipping the field it does not know.
        grpc = grpcclient.InferenceServerClient(s.grpc_url)
        assert grpc.get_inference_statistics("simple").model_stats[0].inference_count == 150
        grpc.close()
    finally:
        assert s.stop() == 0


def test_a_carbon_file_that_appears_later_is_picked_up(repository, tmp_path):
    intensity = tmp_path / "later.csv"
    s = Server(repository, "--carbon-intensity-file=" + str(intensity))
    try:
        assert "nereid_carbon_intensity_grams_per_kwh" not in metrics(s)
        intensity.write_text("0,250\n")
        deadline = time.time() + 15  # the poller re-reads the file every ~5 s
        while time.time() < deadline and "nereid_carbon_intensity_grams_per_kwh" not in metrics(s):
            time.sleep(0.2)
        assert metrics(s)["nereid_carbon_intensity_grams_per_kwh"] == 250
        assert "is not readable" in s.read_log()
    finally:
        assert s.stop() == 0
