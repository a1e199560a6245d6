"""Debian's Prometheus scrapes a running Nereid: the energy series (and Triton's families beside
them) are read back through Prometheus's HTTP API, as a dashboard or an autoscaler would read them.
Prometheus comes from apt (scripts/install-deps.sh); without it the test is skipped."""
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import tritonclient.http as httpclient

from conftest import Server
from test_energy import infer_simple

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed")


def dashboard_queries():
    """The PromQL of every panel of deploy/grafana/nereid-dashboard.json, Grafana's variables
    replaced as Grafana would for "all models" over a short range."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "grafana", "nereid-dashboard.json")
    with open(path) as f:
        dashboard = json.load(f)
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$model", ".*").replace("$__rate_interval", "10s")
            yield panel["title"], expr.replace("$__range", "1m")


class Prometheus:
    def __init__(self, target, workdir):
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: nereid\n    static_configs:\n"
                    f"      - targets: ['{target}']\n")
        self.log_path = os.path.join(workdir, "prometheus.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={workdir}/data",
             "--web.listen-address=127.0.0.1:0"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            m = re.search(r'msg="Listening on" address=127\.0\.0\.1:(\d+)', open(self.log_path).read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("prometheus did not start: " + open(self.log_path).read())

    def query(self, expr):
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        body = json.loads(urllib.request.urlopen(url, timeout=10).read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_for(self, expr, predicate, timeout=30):
        deadline = time.time() + timeout
        while True:
            result = self.query(expr)
            if predicate(result) or time.time() > deadline:
                return result
            time.sleep(0.5)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def test_prometheus_scrapes_the_energy_series(repository, tmp_path):
    s = Server(repository, "--carbon-intensity=300")
    prom = Prometheus(f"127.0.0.1:{s.metrics_port}", str(tmp_path))
    try:
        infer_simple(httpclient.InferenceServerClient(s.url), 200)
        selector = '{job="nereid",model="simple",version="1",scope="process-cpu",source="estimate"}'
        # Every inference is in the series once Prometheus has scraped after the attribution lag.
        rows = prom.wait_for(f"nereid_energy_inferences_total{selector}",
                             lambda r: r and float(r[0]["value"][1]) == 200)
        assert rows and float(rows[0]["value"][1]) == 200, rows
        histogram = prom.wait_for(f"nereid_energy_joules_per_inference_count{selector}",
                                  lambda r: r and float(r[0]["value"][1]) == 200)
        assert histogram and float(histogram[0]["value"][1]) == 200, histogram
        active = prom.query('nereid_energy_joules_total{job="nereid",model="simple",kind="active"}')
        assert len(active) == 1 and float(active[0]["value"][1]) > 0, active
        assert active[0]["metric"]["source"] == "estimate" and active[0]["metric"]["scope"] == "process-cpu"
        # PromQL over the series, as a dashboard computes J per inference and grams per 1,000.
        per_inference = prom.query(
            "sum by (model) (nereid_energy_joules_total) / sum by (model) (nereid_energy_inferences_total)")
        value = {r["metric"]["model"]: float(r["value"][1]) for r in per_inference}
        assert value.get("simple", 0) > 0, per_inference
        grams = prom.query(f"nereid_carbon_grams_total{selector}")
        assert grams and float(grams[0]["value"][1]) > 0, grams
        # Triton's own families come through the same scrape.
        success = prom.query('nv_inference_request_success{job="nereid",model="simple"}')
        assert success and float(success[0]["value"][1]) == 200, success
        assert float(prom.query('up{job="nereid"}')[0]["value"][1]) == 1
        # Every query of the Grafana dashboard under deploy/ parses and finds its series.
        for title, expr in dashboard_queries():
            result = prom.wait_for(expr, bool, timeout=10)
            assert result, (title, expr)
        # The autoscalers' queue time per request (deploy/'s KEDA trigger; the HPA's adapter rule
        # is the same expression per pod), its Kubernetes label matched to this scrape's job.
        import yaml
        keda = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "kubernetes",
                            "keda-scaledobject.yaml")
        trigger = next(d for d in yaml.safe_load_all(open(keda)) if d)["spec"]["triggers"][0]
        expr = trigger["metadata"]["query"].replace('app_kubernetes_io_instance="nereid"', 'job="nereid"')
        queue = prom.wait_for(expr, bool, timeout=10)
        assert len(queue) == 1 and 0 <= float(queue[0]["value"][1]) < 1e6, (expr, queue)
    finally:
        prom.stop()
        assert s.stop() == 0
