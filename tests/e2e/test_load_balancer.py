"""Three Nereid replicas, each in a network namespace of its own (a veth pair to this one; loopback
ports where namespaces cannot be made), behind Debian's
HAProxy (HTTP and gRPC, health checks on /v2/health/ready every 200 ms), bounded load from clients for a fixed time, one replica killed with SIGKILL and
one drained with SIGTERM mid-load (docs/deploy.md): every request HAProxy accepted gets a response,
the drained replica loses nothing, and the failover time is measured. A replica past its admission
limit answers 429 and HAProxy's retry sends the request to another replica."""
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, Server

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
pytestmark = pytest.mark.skipif(not os.path.exists(HAPROXY), reason="Debian's haproxy is not installed")

BODY = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}).encode()
WANT = [i + 1 for i in range(16)]
PERF_RATE, PERF_SECONDS = 300, 6


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HaProxy:
    def __init__(self, workdir, replicas, extra_backend="", probe_model="simple", probe_body=BODY):
        self.http, self.grpc = free_port(), free_port()
        servers_http = "\n".join(f"  server r{i} {r.host}:{r.port} check" for i, r in enumerate(replicas))
        servers_grpc = "\n".join(f"  server r{i} {r.host}:{r.grpc_port} proto h2 check port {r.port} check-proto h1"
                                 for i, r in enumerate(replicas))
        config = f"""global
  maxconn 4000
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 30s
  retries 3
  option redispatch 1
  retry-on conn-failure empty-response response-timeout 503
  option httpchk GET /v2/health/ready
  http-check expect status 200
  default-server inter 200ms fall 1 rise 2
frontend http_in
  bind 127.0.0.1:{self.http}
  default_backend replicas_http
frontend grpc_in
  bind 127.0.0.1:{self.grpc} proto h2
  default_backend replicas_grpc
backend replicas_http
  balance roundrobin
{extra_backend}
{servers_http}
backend replicas_grpc
  balance roundrobin
{servers_grpc}
"""
        path = os.path.join(workdir, "haproxy.cfg")
        with open(path, "w") as f:
            f.write(config)
        self.log = open(os.path.join(workdir, "haproxy.log"), "w")
        self.proc = subprocess.Popen([HAPROXY, "-f", path, "-db"], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:  # up, and every replica seen healthy (rise 2)
            try:
                if post(self.http, probe_model, probe_body)[0] == 200:
                    time.sleep(1)
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("haproxy did not come up")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


def post(port, model="simple", body=BODY):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer", data=body,
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            out = json.loads(r.read())
            if model != "simple":
                return 200, r.headers
            ok = next(o for o in out["outputs"] if o["name"] == "OUTPUT0")["data"] == WANT
            return (200 if ok else -2), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.headers


def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):  # no iproute2 here: loopback ports instead
        return False


@pytest.fixture()
def namespaces():
    """Three network namespaces, each joined to this one by a veth pair (10.231.<i>.1 here,
    .2 there); [] where they cannot be made (no CAP_NET_ADMIN)."""
    made, tag = [], os.getpid() % 10000
    for i in range(3):
        ns, here, there = f"nereid-lb-{tag}-{i}", f"nlb{tag}h{i}", f"nlb{tag}t{i}"
        ok = (run("ip", "netns", "add", ns) and
              run("ip", "link", "add", here, "type", "veth", "peer", "name", there) and
              run("ip", "link", "set", there, "netns", ns) and
              run("ip", "addr", "add", f"10.231.{i}.1/24", "dev", here) and
              run("ip", "link", "set", here, "up") and
              run("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.231.{i}.2/24", "dev", there) and
              run("ip", "netns", "exec", ns, "ip", "link", "set", there, "up") and
              run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"))
        made.append((ns, here))
        if not ok:
            break
    good = len(made) == 3 and all(run("ip", "netns", "exec", ns, "true") for ns, _ in made)
    yield [(ns, f"10.231.{i}.2") for i, (ns, _) in enumerate(made)] if good else []
    for ns, here in made:
        run("ip", "link", "del", here)
        run("ip", "netns", "del", ns)


def test_kill_and_drain_behind_haproxy(tmp_path, repository, namespaces):
    import numpy as np
    import tritonclient.grpc as grpcclient
    args = ("--drain-grace-secs=2", "--exit-timeout-secs=10")
    if namespaces:
        replicas = [Server(repository, *args, "--http-address=0.0.0.0", "--grpc-address=0.0.0.0",
                           prefix=("ip", "netns", "exec", ns), host=address)
                    for ns, address in namespaces]
    else:
        replicas = [Server(repository, *args) for _ in range(3)]
    lb = HaProxy(str(tmp_path), replicas)
    results, stop = [], threading.Event()  # (time, protocol, status)

    def http_load():
        while not stop.is_set():
            t = time.time()
            try:
                status = post(lb.http)[0]
            except OSError as e:  # no response at all: what must never happen
                status = f"no response: {e}"
            results.append((t, "http", status))

    def grpc_load():
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{lb.grpc}")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                  grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(np.ones_like(a))
        while not stop.is_set():
            t = time.time()
            try:
                ok = (c.infer("simple", inputs, client_timeout=20).as_numpy("OUTPUT0") == a + 1).all()
                results.append((t, "grpc", 200 if ok else -2))
            except Exception as e:  # noqa: BLE001 - every outcome is recorded
                results.append((t, "grpc", f"grpc error: {e}"))
        c.close()

    # nereid-perf beside the Python clients: open loop, PERF_RATE requests/s for PERF_SECONDS (the
    # kill at 1.5 s and the drain at 3 s inside), each second's answered and failed in a CSV.
    windows = os.path.join(str(tmp_path), "perf_windows.csv")
    perf = subprocess.Popen(
        [os.path.join(ROOT, "build", "nereid-perf"), "-m", "simple", "-u", f"127.0.0.1:{lb.http}",
         "--rate-schedule", f"{PERF_RATE}:{PERF_SECONDS}", "--windows-file", windows,
         "--max-threads", "16", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    threads = [threading.Thread(target=http_load) for _ in range(6)]
    threads += [threading.Thread(target=grpc_load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        killed = time.time()
        replicas[0].proc.send_signal(signal.SIGKILL)
        time.sleep(1.5)
        drained = time.time()
        replicas[1].proc.send_signal(signal.SIGTERM)
        # The drained replica: readiness false at once, HAProxy takes it out within a check or
        # two, it exits after its 2 s grace with everything it accepted answered.
        assert replicas[1].proc.wait(timeout=20) == 0, replicas[1].read_log()
        time.sleep(1.5)
    finally:
        stop.set()
        for t in threads:
            t.join()
        perf.wait(timeout=60)
        lb.stop()
    log1 = replicas[1].read_log()
    assert "all requests answered" in log1, log1
    assert replicas[2].stop() == 0, replicas[2].read_log()
    for r in replicas[:2]:
        r.log.close()

    total = len(results)
    failed = [(t, p, s) for t, p, s in results if s != 200]
    # Every request got a response, and none failed but those in flight on, or sent to, the killed
    # replica before HAProxy saw it go (HAProxy retries a POST only when it could not send it:
    # those already sent answer 502): the drain lost nothing.
    assert total > 500, total
    assert all(killed - 0.5 <= t <= killed + 1.0 for t, _, _ in failed), [
        (f"kill+{t - killed:.3f}s", f"drain+{t - drained:.3f}s", p, s) for t, p, s in failed[:10]]
    after_kill = [t for t, _, s in failed]
    failover = max(0.0, max(after_kill) - killed) if after_kill else 0.0
    ok_after = [s for t, _, s in results if t > drained]
    assert ok_after and all(s == 200 for s in ok_after)
    # nereid-perf: every request it sent has an outcome; failures only in the kill's seconds.
    with open(windows) as f:
        rows = list(csv.DictReader(f))
    sent = sum(int(r["answered"]) + int(r["errors"]) for r in rows)
    perf_failed = {int(r["second"]): int(r["errors"]) for r in rows if int(r["errors"])}
    assert abs(sent - PERF_RATE * PERF_SECONDS) <= 1, (sent, rows)
    assert set(perf_failed) <= {1, 2} and sum(perf_failed.values()) <= 10, perf_failed
    print(f"\nhaproxy ({'network namespaces' if namespaces else 'loopback ports'}): {total} requests ({sum(p == 'grpc' for _, p, _ in results)} gRPC), "
          f"{len(failed)} failed, all within {failover:.2f} s of the SIGKILL; the drain lost none; "
          f"nereid-perf: {sent} requests, {sum(perf_failed.values())} failed")


def test_a_full_replica_answers_429_and_the_others_take_the_load(tmp_path):
    # HAProxy 2.6 retries on 503 but not on 429 (not in its retry-on codes): the client retries,
    # at once, and round robin takes the retry to another replica.
    import sys

    from test_deploy import write_slow
    limit = 'parameters { key: "nereid.max_queued_requests" value { string_value: "1" } }\n'
    repos = []
    for i, extra in enumerate((limit, "")):
        repo = tmp_path / f"replica{i}"
        repo.mkdir()
        write_slow(repo, "slow", extra)
        repos.append(repo)
    replicas = [Server(str(r), env={"NEREID_PYTHON": sys.executable}) for r in repos]
    body = json.dumps({"inputs": [{"name": "X", "shape": [1], "datatype": "FP32",
                                   "data": [0.5]}]}).encode()
    try:
        lb = HaProxy(str(tmp_path), replicas, probe_model="slow", probe_body=body)
        try:
            outcomes = []

            def client():
                tries = []
                for _ in range(6):
                    req = urllib.request.Request(f"http://127.0.0.1:{lb.http}/v2/models/slow/infer",
                                                 data=body, method="POST")
                    try:
                        with urllib.request.urlopen(req, timeout=20) as r:
                            tries.append(r.status)
                            break
                    except urllib.error.HTTPError as e:
                        tries.append((e.code, e.headers.get("Retry-After")))
                outcomes.append(tries)

            threads = [threading.Thread(target=client) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            lb.stop()
        assert all(o[-1] == 200 for o in outcomes), outcomes
        refused = [t for o in outcomes for t in o if t != 200]
        assert refused and all(t == (429, "1") for t in refused), outcomes
        print(f"\nadmission behind haproxy: {len(refused)} 429s, every request answered on a retry")
    finally:
        for r in replicas:
            assert r.stop() == 0, r.read_log()
