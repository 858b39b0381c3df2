"""Alerts end to end on loopback: Debian's real Prometheus scrapes, from the file_sd files gpuhosts renders, the
trainer stack's targets — the real training monitor (its app behind its bearer token, a stalled run by its own
clock) and stand-ins of the DCGM exporter, the node exporter and the hidden-state server that export the catalog's
names — and kpro5's engines, SGLang and vLLM (tests/engine_standin.py), evaluates the generated rules, and sends what
fires to Debian's real Alertmanager, which posts it to a webhook receiver here. One Prometheus and one Alertmanager
serve the whole module. Every wait polls for its marker (an alert at the receiver, a rule evaluated again, a target
scraped) under READY_CAP_S; none sleeps for a fixed time."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from werkzeug.serving import make_server

from conftest import READY_CAP_S
from gpuhosts.metrics import catalog
from conftest import KPRO5_SECRETS, kpro5_values, trainer_values
from engine_standin import MODEL, Engine, start_engine
from gpuhosts.config import MonitoringSpec
from gpuhosts.observability import DCGM_EXPORTER_RELEASE, NODE_EXPORTER_RELEASE, Watch, watch_proxmox, watch_trainer
from gpuhosts.plans.observability import RULES_DIR, render_observability
from gpuhosts.stacks import validate_stack
from gpuhosts.training import NodeConfig, TrainerStack, TrainingConfig
from observability_data import tool
from sshhost import free_port
from monitor_bed import HealthServer, LOG_WRITTEN, TOKEN, TRAINING, app_for

# The alerts that fire at once in this scenario (rules without a `for`): a stalled run, Xid 79 and a double-bit ECC
# error on GPU 0. The others need minutes of `for` and are proven firing and quiet by promtool (test_alert_rules.py).
EXPECTED = {"GpuhostsTrainingStalled", "GpuhostsGpuXid", "GpuhostsGpuEccUncorrectable"}
# kpro5 watched as one host per case, so each case's alerts are told apart by gpuhosts_host: an engine whose drafter
# no longer matches (the seed's 1.1 % acceptance), one that answers as the gate left it, and one stopped.
CASES = ("collapsed", "healthy", "stopped")
ENGINES = ("sglang", "vllm")


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
    """Alertmanager's webhook receiver: every alert posted, in order."""

    def __init__(self) -> None:
        self.alerts: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.alerts += body["alerts"]
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alerts"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def received(self, host: str) -> dict[tuple[str, str | None], dict]:
        """The alerts of one host so far, by (alertname, service)."""
        with self.lock:
            return {(a["labels"]["alertname"], a["labels"].get("service")): a for a in self.alerts
                    if a["labels"].get("gpuhosts_host") == host}

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


def kpro5_engine_watch(engine: str, case: str) -> Watch:
    """kpro5 with `engine`'s service enabled (its stack file's way to compare them), as host kpro5-<case>; its
    engines only: the exporters of a host are the trainer's part of this module."""
    values = kpro5_values()
    for service in values["services"]:
        service["enabled"] = service["engine"]["name"] == engine
    watch = watch_proxmox(validate_stack(values, KPRO5_SECRETS), f"kpro5-{case}")
    return dataclasses.replace(watch, targets=tuple(t for t in watch.targets if t.job == "engines"))


def trainer_watch_with_token(token_file: Path) -> Watch:
    """The trainer with a monitor token: gpuhosts then renders the monitor's job with `authorization` from a file,
    here the copy a Prometheus that is not root reads (`monitoring.monitorTokenFile`)."""
    values = trainer_values()
    values["training"]["monitor"]["tokenSecret"] = "monitorToken"
    stack = TrainerStack(NodeConfig.model_validate(values["node"]), TrainingConfig.model_validate(values["training"]))
    return watch_trainer(stack, MonitoringSpec.model_validate({"monitorTokenFile": str(token_file)}))


def stand_in_engine(engine: str, case: str) -> Engine:
    if case == "collapsed" and engine == "sglang":
        # the seed's case as SGLang reports it: acceptance length near 1, rate 1.1 % (tests/test_service_scripts.py)
        return Engine(kind="sglang", sglang_length=1.04, sglang_rate=0.011)
    if case == "collapsed":
        # the seed's case as vLLM counts it: 15 tokens drafted, 1.1 % accepted (tests/test_deploy_gate.py)
        return Engine(kind="vllm", accept_rate=0.011)
    return Engine(kind=engine)


def without_for(text: str) -> str:
    """The rule file with each rule's `for` taken out: its 2 and 10 minutes cannot be waited for here, and
    promtool test rules proves each duration on simulated time (tests/test_alert_rules.py); what is left, every
    expression over the names the targets export, is what this module proves."""
    document = yaml.safe_load(text)
    for group in document["groups"]:
        for rule in group["rules"]:
            rule.pop("for", None)
    return yaml.safe_dump(document, sort_keys=False)


def merged(fragments: list[dict]) -> dict:
    """One Prometheus's configuration from several rendered fragments: the rule files of all, one job per name
    reading every fragment's file_sd files (a job name is unique in a configuration)."""
    rule_files: list[str] = []
    jobs: dict[str, dict] = {}
    for fragment in fragments:
        rule_files += fragment["rule_files"]
        for job in fragment["scrape_configs"]:
            if job["job_name"] not in jobs:
                jobs[job["job_name"]] = json.loads(json.dumps(job))
                continue
            known = jobs[job["job_name"]]
            assert {k: v for k, v in known.items() if k != "file_sd_configs"} == \
                {k: v for k, v in job.items() if k != "file_sd_configs"}, job
            known["file_sd_configs"][0]["files"] += job["file_sd_configs"][0]["files"]
    return {"rule_files": rule_files, "scrape_configs": list(jobs.values())}


def write(watch: Watch, root: Path) -> None:
    for path, text in render_observability(watch, str(root)).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(without_for(text) if path.startswith(RULES_DIR) else text)


@dataclasses.dataclass
class Scene:
    prometheus: str
    hook: Webhook
    trainer: Watch
    engines: dict[tuple[str, str], Watch]
    roots: dict[str, Path]
    log: Path
    monitor_job: dict

    def api(self, path: str):
        with urllib.request.urlopen(self.prometheus + path, timeout=10) as response:
            return json.load(response)["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["result"]

    def rules(self, path: Path) -> dict[str, dict]:
        """The rules Prometheus evaluates from one rule file, by alert name."""
        return {r["name"]: r for g in self.api("/api/v1/rules")["groups"] if g["file"] == str(path)
                for r in g["rules"]}

    def until(self, what: str, check):
        deadline = time.monotonic() + READY_CAP_S
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.1)  # a poll's pace, not a verdict: the cap above bounds the wait
        pytest.fail(f"{what} not within {READY_CAP_S} s: {self.log.read_text()[-3000:]}")


def traffic(engines: list[Engine], servers: list, stop: threading.Event) -> None:
    """Requests to the vLLM stand-ins: vLLM's speculative counters move only with traffic (the gate's rule reads
    their rates), so without it the acceptance quotient is empty and nothing fires."""
    body = json.dumps({"model": MODEL, "temperature": 0, "max_tokens": 16,
                       "messages": [{"role": "user", "content": "Name three fjords."}]}).encode()
    while not stop.is_set():
        for engine, server in zip(engines, servers, strict=True):
            if engine.kind == "vllm":
                request = urllib.request.Request(f"http://127.0.0.1:{server.server_port}/v1/chat/completions", body,
                                                 {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=10):
                    pass
        stop.wait(0.2)  # the traffic's pace; no verdict waits on it


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("alerts")
    stop: list = []
    procs: list[subprocess.Popen] = []
    try:
        token_file, wrong_file = tmp / "monitor.token", tmp / "wrong.token"
        token_file.write_text(TOKEN + "\n")
        wrong_file.write_text("not-" + TOKEN + "\n")
        health = HealthServer()
        stop.append(health.close)
        watch = trainer_watch_with_token(token_file)
        monitor_app = app_for(tmp, TRAINING / "speculators-0.9.0-fresh.log", health.url, now=LOG_WRITTEN + 121,
                              token=TOKEN)
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
        watch = dataclasses.replace(watch, targets=tuple(dataclasses.replace(t, address=addresses[t.job])
                                                         for t in watch.targets))
        roots = {"trainer": tmp / "trainer"}
        write(watch, roots["trainer"])
        fragments = [yaml.safe_load((roots["trainer"] / f"prometheus/scrape-{watch.stack}.yml").read_text())]

        engines, servers, watches = [], [], {}
        for engine in ENGINES:
            for case in CASES:
                kpro5 = kpro5_engine_watch(engine, case)
                if case == "stopped":
                    address = f"127.0.0.1:{free_port()}"  # nothing listens there
                else:
                    engines.append(stand_in_engine(engine, case))
                    servers.append(start_engine(engines[-1]))
                    stop.append(servers[-1].shutdown)
                    address = f"127.0.0.1:{servers[-1].server_port}"
                kpro5 = dataclasses.replace(kpro5, targets=tuple(dataclasses.replace(t, address=address)
                                                                 for t in kpro5.targets))
                watches[(engine, case)] = kpro5
                roots[f"{engine}-{case}"] = root = tmp / f"{engine}-{case}"
                write(kpro5, root)
                place = kpro5.targets[0].place
                fragments.append(yaml.safe_load((root / f"prometheus/scrape-{place}.yml").read_text()))
        halt = threading.Event()
        stop.insert(0, halt.set)
        threading.Thread(target=traffic, args=(engines, servers, halt), daemon=True).start()

        config = merged(fragments)
        monitor_job = next(j for j in config["scrape_configs"] if j["job_name"] == "gpuhosts-training-monitor")
        # the same target scraped twice more, under jobs no rule selects: without the token and with a wrong one
        config["scrape_configs"] += [
            {**{k: v for k, v in monitor_job.items() if k != "authorization"}, "job_name": "monitor-without-token"},
            {**monitor_job, "job_name": "monitor-with-wrong-token",
             "authorization": {"type": "Bearer", "credentials_file": str(wrong_file)}}]
        hook = Webhook()
        stop.append(hook.close)
        am_port, prom_port = free_port(), free_port()
        (tmp / "alertmanager.yml").write_text(yaml.safe_dump({
            "route": {"receiver": "hook", "group_by": ["alertname", "gpuhosts_host", "service"], "group_wait": "0s",
                      "group_interval": "1s", "repeat_interval": "1h"},
            "receivers": [{"name": "hook", "webhook_configs": [{"url": hook.url, "send_resolved": False}]}]}))
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]}
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        am_log, prom_log = tmp / "alertmanager.log", tmp / "prometheus.log"
        procs.append(started([tool("prometheus-alertmanager"), f"--config.file={tmp / 'alertmanager.yml'}",
                              f"--storage.path={tmp / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
                              "--cluster.listen-address="], am_log))
        ready(f"http://127.0.0.1:{am_port}/-/ready", procs[-1], am_log)
        procs.append(started([tool("prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
                              f"--storage.tsdb.path={tmp / 'prom-data'}",
                              f"--web.listen-address=127.0.0.1:{prom_port}"], prom_log))
        ready(f"http://127.0.0.1:{prom_port}/-/ready", procs[-1], prom_log)
        yield Scene(f"http://127.0.0.1:{prom_port}", hook, watch, watches, roots, prom_log, monitor_job)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        for close in stop:
            close()


def test_alerts_reach_a_webhook_through_alertmanager(scene):
    watch = scene.trainer
    received = scene.until("the trainer's alerts at the webhook",
                           lambda: (got := scene.hook.received(watch.stack)) and {n for n, _ in got} >= EXPECTED
                           and got)
    # no other alert: with every `for` out, the other rules stay quiet because the targets answer as a healthy node
    assert {name for name, _ in received} == EXPECTED, sorted(received)
    stalled = received[("GpuhostsTrainingStalled", None)]
    assert stalled["labels"]["gpuhosts_host"] == watch.stack and stalled["status"] == "firing"
    assert received[("GpuhostsGpuXid", None)]["annotations"]["summary"] == f"GPU 0 on {watch.stack} reported Xid 79"
    rules = yaml.safe_load((scene.roots["trainer"] / RULES_DIR / f"gpuhosts-{watch.stack}.rules.yml").read_text())
    assert EXPECTED <= {r["alert"] for g in rules["groups"] for r in g["rules"]}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_collapsed_acceptance_and_a_stopped_engine_reach_the_webhook_and_a_healthy_one_raises_neither(scene, engine):
    collapsed, healthy, stopped = (scene.engines[(engine, case)] for case in CASES)
    service = collapsed.engines[0].service
    assert collapsed.engines[0].exporter == engine
    got = scene.until(f"{engine}'s collapse and its stopped engine at the webhook", lambda: (
        (c := scene.hook.received(collapsed.stack).get(("GpuhostsAcceptanceCollapsed", service)))
        and (s := scene.hook.received(stopped.stack).get(("GpuhostsServiceDown", service))) and (c, s)))
    collapse, down = got
    assert collapse["status"] == "firing" and collapse["labels"]["severity"] == "critical"
    assert collapse["annotations"]["summary"] == f"speculative acceptance of {service} collapsed"
    # the value the rule saw, through the engine's own metric names: the seed's 1.1 %
    assert "minAcceptanceRate 0.1 " in collapse["annotations"]["description"]
    assert "(1.1%)" in collapse["annotations"]["description"], collapse["annotations"]
    assert down["labels"]["instance"] == stopped.targets[0].address and down["labels"]["job"] == "gpuhosts-engines"
    assert ("GpuhostsServiceDown", service) not in scene.hook.received(collapsed.stack)

    # the healthy engine: scraped, its acceptance above the floor, then evaluated again by both rules, which stay
    # inactive and send nothing
    path = scene.roots[f"{engine}-healthy"] / RULES_DIR / f"gpuhosts-{healthy.stack}.rules.yml"
    expr = next(r["expr"] for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]
                if r["alert"] == "GpuhostsAcceptanceCollapsed")
    acceptance, floor = expr.rsplit(" < ", 1)

    def scraped():
        up = scene.query(f'up{{gpuhosts_host="{healthy.stack}",service="{service}"}}')
        value = scene.query(acceptance)
        if up and up[0]["value"][1] == "1" and value:
            return float(value[0]["value"][1]), scene.rules(path)

    value, seen = scene.until(f"{engine}'s healthy engine scraped", scraped)
    assert value > float(floor)
    names = ("GpuhostsAcceptanceCollapsed", "GpuhostsServiceDown")
    after = scene.until(f"{engine}'s healthy rules evaluated again", lambda: (
        (now := scene.rules(path))
        and all(now[n]["lastEvaluation"] != seen[n]["lastEvaluation"] for n in names) and now))
    for name in names:
        assert (after[name]["state"], after[name]["health"]) == ("inactive", "ok"), after[name]
    assert not [key for key in scene.hook.received(healthy.stack) if key[1] == service]


def test_the_monitor_is_scraped_with_the_token_from_its_file_and_is_down_without_it(scene):
    assert scene.monitor_job["authorization"]["type"] == "Bearer"
    token_file = Path(scene.monitor_job["authorization"]["credentials_file"])
    assert token_file.read_text().strip() == TOKEN
    pools = ("gpuhosts-training-monitor", "monitor-without-token", "monitor-with-wrong-token")

    def scraped():
        targets = {t["scrapePool"]: t for t in scene.api("/api/v1/targets?state=active")["activeTargets"]}
        if all(targets.get(p, {}).get("health", "unknown") != "unknown" for p in pools):
            return targets

    targets = scene.until("the monitor's three scrapes", scraped)
    assert (targets[pools[0]]["health"], targets[pools[0]]["lastError"]) == ("up", ""), targets[pools[0]]
    for pool in pools[1:]:
        assert targets[pool]["health"] == "down" and "401" in targets[pool]["lastError"], targets[pool]
    # the monitor's own numbers came through the authenticated scrape
    assert scene.query('gpuhosts_training_stalled{job="gpuhosts-training-monitor"}')
    for path in scene.roots["trainer"].rglob("*"):
        assert not path.is_file() or TOKEN not in path.read_text(), path
