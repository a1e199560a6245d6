"""Energy accounting on the real binary: on a machine without a meter every model has energy series
labelled source="estimate", the parts add up to the meter's figure, and the flag turns it off."""
import time
import urllib.request

import numpy as np
import tritonclient.http as httpclient

from conftest import Server


def metrics(server):
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
    rows = {}
    for line in text.splitlines():
        if line.startswith(("nereid_energy", "nereid_carbon", "nereid_pue")):
            key, value = line.rsplit(" ", 1)
            rows[key] = float(value)
    return rows


def infer_simple(client, n):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(name, [1, 16], "INT32")
        i.set_data_from_numpy(a)
        inputs.append(i)
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
