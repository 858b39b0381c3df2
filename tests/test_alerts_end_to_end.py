"""An alert end to end on loopback: Debian's real Prometheus scrapes the trainer stack's targets from the file_sd
files gpuhosts renders — the real training monitor (its app, a stalled run by its own clock) and stand-ins of the
DCGM exporter, the node exporter and the hidden-state server that export the catalog's names — evaluates the
generated rules, and sends what fires to Debian's real Alertmanager, which posts it to a webhook receiver here.
Every wait polls for its marker (the alert at the receiver) under READY_CAP_S; none sleeps for a fixed time."""

from __future__ import annotations

import dataclasses
import json
import queue
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from werkzeug.serving import make_server

from conftest import READY_CAP_S
from gpuhosts.metrics import catalog
from gpuhosts.observability import DCGM_EXPORTER_RELEASE, NODE_EXPORTER_RELEASE
from gpuhosts.plans.observability import RULES_DIR, render_observability
from observability_data import tool, trainer_watch
from sshhost import free_port
from test_monitor import LOG_WRITTEN, TRAINING, app_for, health_server  # noqa: F401 - a fixture, used by name

# The alerts that fire at once in this scenario (rules without a `for`): a stalled run, Xid 79 and a double-bit ECC
# error on GPU 0. The others need minutes of `for` and are proven firing and quiet by promtool (test_alert_rules.py).
EXPECTED = {"GpuhostsTrainingStalled", "GpuhostsGpuXid", "GpuhostsGpuEccUncorrectable"}


class Exposition:
    """A stand-in exporter on loopback: /metrics answers with whatever text `body` returns at that moment."""

    def __init__(self, body) -> None:
        outer = self
        self.body = body

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                data = outer.body().encode() if self.path == "/metrics" else b""
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def gauge_text(samples: list[tuple[str, str, dict[str, str], float]]) -> str:
    lines, typed = [], set()
    for name, kind, labels, value in samples:
        if name not in typed:
            lines.append(f"# TYPE {name.removesuffix('_total') if kind == 'counter' else name} {kind}")
            typed.add(name)
        inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{name}{{{inner}}} {value}")
    return "\n".join(lines) + "\n"


class Ecc:
    """DCGM's double-bit counter: 0 on the first scrape, 1 from the second on, so increase() sees it move."""

    def __init__(self) -> None:
        self.scrapes = 0

    def __call__(self) -> float:
        self.scrapes += 1
        return 0.0 if self.scrapes == 1 else 1.0


def dcgm_text(ecc: Ecc) -> str:
    m = catalog().release("dcgm", DCGM_EXPORTER_RELEASE).metrics
    gpu = {"gpu": "0", "UUID": "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", "modelName": "NVIDIA RTX PRO 6000"}
    return gauge_text([(m["xid"].name, "gauge", gpu, 79), (m["ecc_dbe"].name, "counter", gpu, ecc()),
                       (m["memory_used"].name, "gauge", gpu, 40000), (m["memory_free"].name, "gauge", gpu, 57000)])


def node_text(storage: str) -> str:
    m = catalog().release("node", NODE_EXPORTER_RELEASE).metrics
    fs = {"device": "/dev/nvme0n1p1", "fstype": "ext4", "mountpoint": storage}
    return gauge_text([(m["filesystem_avail"].name, "gauge", fs, 9e11), (m["filesystem_size"].name, "gauge", fs, 1.9e12)])


def server_text(release: str) -> str:
    m = catalog().release("vllm", release).metrics
    return gauge_text([(m["http_requests"].name, "counter", {"handler": "/v1/completions", "method": "POST",
                                                             "status": "2xx"}, 40)])


class Webhook:
    """Alertmanager's webhook receiver: each POST's JSON body, in order."""

    def __init__(self) -> None:
        self.bodies: queue.Queue = queue.Queue()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                outer.bodies.put(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alerts"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def started(argv: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT)


def ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + READY_CAP_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{url}: exited {proc.returncode}: {log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)  # a poll's pace, not a verdict: the cap above bounds the wait
    pytest.fail(f"{url} not ready within {READY_CAP_S} s: {log.read_text()[-3000:]}")


@pytest.fixture
def loopback(tmp_path, health_server):
    """The trainer's targets on loopback ports, the real monitor serving a run stalled 121 s by its own clock."""
    stop = []
    watch = trainer_watch()
    monitor_app = app_for(tmp_path, TRAINING / "speculators-0.9.0-fresh.log", health_server.url, now=LOG_WRITTEN + 121)
    monitor = make_server("127.0.0.1", 0, monitor_app, threaded=True)
    threading.Thread(target=monitor.serve_forever, daemon=True).start()
    stop.append(monitor.shutdown)
    server = next(t for t in watch.targets if t.job == "hidden-state-server")
    ecc = Ecc()
    stand_ins = {"dcgm": Exposition(lambda: dcgm_text(ecc)), "node": Exposition(lambda: node_text(watch.storage)),
                 "hidden-state-server": Exposition(lambda: server_text(server.release))}
    stop += [s.close for s in stand_ins.values()]
    addresses = {job: s.address for job, s in stand_ins.items()}
    addresses["training-monitor"] = f"127.0.0.1:{monitor.server_port}"
    yield dataclasses.replace(watch, targets=tuple(dataclasses.replace(t, address=addresses[t.job])
                                                   for t in watch.targets))
    for close in stop:
        close()


def test_alerts_reach_a_webhook_through_alertmanager(tmp_path, loopback):
    watch = loopback
    root = tmp_path / "observability"
    for path, text in render_observability(watch, str(root)).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    hook = Webhook()
    am_port, prom_port = free_port(), free_port()
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump({
        "route": {"receiver": "hook", "group_by": ["alertname"], "group_wait": "0s", "group_interval": "1s",
                  "repeat_interval": "1h"},
        "receivers": [{"name": "hook", "webhook_configs": [{"url": hook.url, "send_resolved": False}]}]}))
    fragment = yaml.safe_load((root / f"prometheus/scrape-{watch.stack}.yml").read_text())
    fragment["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    fragment["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(fragment))
    procs = []
    try:
        am_log, prom_log = tmp_path / "alertmanager.log", tmp_path / "prometheus.log"
        procs.append(started([tool("prometheus-alertmanager"), f"--config.file={tmp_path / 'alertmanager.yml'}",
                              f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
                              "--cluster.listen-address="], am_log))
        ready(f"http://127.0.0.1:{am_port}/-/ready", procs[-1], am_log)
        procs.append(started([tool("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                              f"--storage.tsdb.path={tmp_path / 'prom-data'}",
                              f"--web.listen-address=127.0.0.1:{prom_port}"], prom_log))
        ready(f"http://127.0.0.1:{prom_port}/-/ready", procs[-1], prom_log)
        received: dict[str, dict] = {}
        deadline = time.monotonic() + READY_CAP_S
        while set(received) < EXPECTED and time.monotonic() < deadline:
            try:
                body = hook.bodies.get(timeout=1)
            except queue.Empty:
                continue
            for alert in body["alerts"]:
                received[alert["labels"]["alertname"]] = alert
        assert set(received) >= EXPECTED, (sorted(received), prom_log.read_text()[-3000:])
        # no other alert: the rules without a `for` are these three, and the targets answer as a healthy node would
        assert set(received) == EXPECTED, sorted(received)
        stalled = received["GpuhostsTrainingStalled"]
        assert stalled["labels"]["gpuhosts_host"] == watch.stack and stalled["status"] == "firing"
        assert received["GpuhostsGpuXid"]["annotations"]["summary"] == f"GPU 0 on {watch.stack} reported Xid 79"
        rules = yaml.safe_load((root / RULES_DIR / f"gpuhosts-{watch.stack}.rules.yml").read_text())
        assert EXPECTED <= {r["alert"] for g in rules["groups"] for r in g["rules"]}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        hook.close()
