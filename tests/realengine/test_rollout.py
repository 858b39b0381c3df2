"""A rolling upgrade under load through the real Pulumi CLI: kpro5's SGLang service as three replicas (one GPU
each) behind its gateway, the real smg 1.13.0 router (from the committed lock, tests/verify_gateway) in front of the
engine stand-ins the simulated container runs, and a bounded load loop on loopback sending requests through the
gateway for the whole `pulumi up` of an engine flag change that restarts every replica.

* the change rolls through the replicas one at a time (drain, unit, gate, put back): the engine's
  event stream shows each step as an update, the provider's log shows them run on the host in that order, and not
  one request through the gateway fails, each replica's time out of the gateway served by the others;
* the second replica's deploy gate fails: `up` exits non-zero with the engine naming that gate and its measure,
  nothing of the third replica runs or changes in the state, the first replica runs the new command line and
  serves, the third keeps the old one and stays in the gateway, the failed one stays out of it, and still no
  request fails.

`make test-pulumi` prints the figure lines `rollout: replicas=<n> requests=<n> failed=<n>` and
`rollout-gate-failure: requests=<n> failed=<n> stopped_at_its_replica=yes`.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fakehost import engines
from fakehost.util import configure
from realengine import Run, Stack, urn_name
from realengine.beds import Converged, fresh_name
from replicas_data import replica_stack
from sshhost import free_port
from sshhost.bed import PROJECT, SECRETS, Bed
from verify_gateway.run import install_env, site_packages

pytestmark = pytest.mark.pulumi

REPLICAS = ("qwen-sglang", "qwen-sglang-r1", "qwen-sglang-r2")
GATEWAY = "ct129-gateway-qwen-sglang"
# One GPU per replica: both RTX A6000 and the second RTX 3090, which the stack moves into CT 129 for the third.
GPUS = ("0000:41:00.0", "0000:61:00.0", "0000:21:00.0")
# The engine flag the rollouts change: accepted by SGLang 0.5.11 (server_args.py `--log-level`), ignored by the
# stand-in, and part of each replica's ExecStart, so every replica's unit restarts.
FLAG = "--log-level"
# Tokens per streamed reply and the stand-in's pause before each: a request is in flight for about a fifth of a
# second, so a replica stopped while the gateway still sends it requests cuts one off.
TOKENS, TOKEN_DELAY_S = 16, 0.012
# A cap on the load loop, which otherwise runs for exactly as long as the `up` it watches.
MAX_REQUESTS = 20000
BEHAVIOUR = {"tokens": TOKENS, "token_delay": TOKEN_DELAY_S}
# The resource type of every host unit, whatever its kind (components/host_units.py).
UNIT_TYPE = "pulumi-python:dynamic/gpuhosts:"
UNIT_FILE = "var/lib/lxc/129/rootfs/etc/systemd/system/gpuhosts-{}.service"
# The rollout's steps of one replica that a changed command line runs, in the order its chain of dependencies runs
# them (its environment, which the flag leaves as it is, does not run).
STEPS = ("drain", "service", "gate", "admit")


class Load:
    """Requests through the gateway from one thread per replica, each sending one after the other until stopped
    (or MAX_REQUESTS in all), so that every replica nearly always holds a request when its turn comes: each
    recorded with the workers the gateway listed as ready just before it was sent, so that a request is known to
    have been served while a given replica was out."""

    def __init__(self, gateway: str, key: str, clients: int = len(REPLICAS)):
        self.gateway, self.key = gateway, key
        self.sent: list[tuple[frozenset, bool, str]] = []
        self.stopping = threading.Event()
        self.first = threading.Event()
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(clients)]

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, str]:
        request = urllib.request.Request(self.gateway + path, method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {self.key}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def ready_workers(self) -> frozenset:
        status, text = self.call("GET", "/workers")
        if status != 200:
            return frozenset()
        return frozenset(w["url"] for w in json.loads(text).get("workers", []) if w.get("status") == "ready")

    def one(self) -> tuple[bool, str]:
        """One streamed request; answered only when every token and the stream's end arrived. Streamed, because
        smg retries a request that a worker refused on another one (`--retry-max-retries`, 5 by default: smg 1.13.0
        router_args.py), so a replica restarted while still in the gateway fails no plain request; a stream it cuts
        half-way has already been answered and cannot be retried."""
        body = {"model": "qwen3.6-27b", "messages": [{"role": "user", "content": "Say one word."}],
                "max_tokens": TOKENS, "stream": True}
        try:
            status, text = self.call("POST", "/v1/chat/completions", body)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            return False, f"cut off: {error!r}"
        if status != 200:
            return False, f"{status}: {text[:200]}"
        events = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
        tokens = sum(1 for e in events if e != "[DONE]" and json.loads(e)["choices"]
                     and json.loads(e)["choices"][0]["delta"].get("reasoning_content"))
        if events[-1:] != ["[DONE]"] or tokens != TOKENS:
            return False, f"stream ended after {tokens} of {TOKENS} tokens: {text[-200:]}"
        return True, ""

    def loop(self) -> None:
        while not self.stopping.is_set() and len(self.sent) < MAX_REQUESTS:
            try:
                ready = self.ready_workers()
            except (urllib.error.URLError, OSError):
                ready = frozenset()
            ok, what = self.one()
            self.sent.append((ready, ok, what))
            if ok:
                self.first.set()

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        # The loop runs before the `up` starts: its first answered request is the marker; the wait is a cap that
        # reports a gateway that never answers.
        assert self.first.wait(timeout=120), f"no request through the gateway was answered: {self.sent[-3:]}"
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in self.threads), "the load loop did not stop"

    def failed(self) -> list[str]:
        return [what for _, ok, what in self.sent if not ok]

    def served_while_out(self, url: str) -> int:
        """Requests answered while `url` was not among the gateway's ready workers."""
        return sum(1 for ready, ok, _ in self.sent if ok and ready and url not in ready)


def rollout_values(bed: Bed, ports: tuple[int, ...], gateway_port: int, flag_value: str | None) -> dict:
    values = bed.services_values(ports[0], free_port())
    values["gpus"][1] = {"address": GPUS[2], "model": "RTX 3090", "use": "container", "container": 129}
    service = values["services"][0]
    values["services"] = [service]
    service.pop("gpus")
    service["tensorParallelSize"] = 1
    service["replicas"] = [{"gpus": [gpu], **({"port": port} if i else {})}
                           for i, (gpu, port) in enumerate(zip(GPUS, ports))]
    service["gateway"] = {"port": gateway_port, "bind": "127.0.0.1", "policy": "round_robin",
                          "health": {"intervalS": 1, "timeoutS": 2, "failureThreshold": 2, "successThreshold": 1}}
    if flag_value is not None:
        service["extraArgs"] = [FLAG, flag_value]
    return values


def real_smg() -> Path:
    """The site-packages of the gateway's locked environment (build/gateway/, tests/verify_gateway/run.py), installed
    from the committed lock when its smg is not there yet."""
    version = replica_stack().services[0].gateway.version
    venv = PROJECT / "build" / "gateway" / f"smg-{version}"
    if not list(venv.glob(f"lib/python*/site-packages/smg-{version}.dist-info")):
        venv, _how = install_env()
    return site_packages(venv)


def unit_text(bed: Bed, replica: str) -> str:
    return (bed.tree / UNIT_FILE.format(replica)).read_text()


def steps_of(replica: str) -> list[str]:
    return [f"ct129-{step}-{replica}" for step in STEPS]


def finished(run: Run, operation: str) -> list[str]:
    """The resources the engine reported done with `operation`, in the order its event stream reported them (its
    refresh's events come first and carry their own operation)."""
    return [urn_name(event["resOutputsEvent"]["metadata"]["urn"]) for event in run.events
            if "resOutputsEvent" in event and event["resOutputsEvent"]["metadata"]["op"] == operation]


def applied(host: Converged) -> dict:
    """The host units' state (`pulumi-python:dynamic/gpuhosts:<kind>` resources) without what a refresh rewrites
    (the observed facts)."""
    return {name: (entry["id"], {k: v for k, v in entry["inputs"].items() if k != "facts"})
            for name, entry in host.state().items() if entry["type"].startswith(UNIT_TYPE)}


@pytest.fixture(scope="module")
def rollout(project, tmp_path_factory):
    """kpro5 converged by the CLI from its seed with the three replicas and the gateway serving (no VM holds the
    RTX 3090 the third replica takes): (the host and its stack, the replicas' ports, the gateway's port)."""
    site = real_smg()
    bed = Bed.seed(tmp_path_factory.mktemp("rollout") / "bed", vms=((101, "win-3090", "0000:01:00", True),))
    configure(bed.tree, serve_engines=True, real_packages={"smg": str(site)},
              engine_behaviour={name: BEHAVIOUR for name in REPLICAS})
    ports = tuple(free_port() for _ in REPLICAS)
    gateway_port = free_port()
    try:
        host = Converged(bed, Stack(project, fresh_name("rollout"), "kpro5",
                                    rollout_values(bed, ports, gateway_port, None), bed.secrets()))
        first = host.up()
        assert first.changed().get(GATEWAY) == "create", first.changed()
        yield host, ports, gateway_port
    finally:
        engines.stop_all(bed.tree)
        bed.close()


def gateway_of(gateway_port: int) -> str:
    return f"http://127.0.0.1:{gateway_port}"


def test_a_flag_change_rolls_through_the_replicas_under_load_and_no_request_fails(rollout, figures):
    host, ports, gateway_port = rollout
    bed = host.bed
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    values = rollout_values(bed, ports, gateway_port, "info")
    with Load(gateway_of(gateway_port), SECRETS["llmApiKey"]) as load:
        assert load.ready_workers() == frozenset(urls), "not every replica was in the gateway before the change"
        run = host.up(values)
        # The last replica is back in the gateway once its put-back returned; the loop sees it at once.
        final = load.ready_workers()
    order = [name for replica in REPLICAS for name in steps_of(replica)]
    changed = run.changed()
    assert {name: changed.get(name) for name in order} == {name: "update" for name in order}, changed
    assert GATEWAY not in changed
    # One replica at a time: the engine reported each step's outputs, and the host ran each step's ensure, only
    # after the step before it, the previous replica's put-back included.
    assert [name for name in finished(run, "update") if name in order] == order, finished(run, "update")
    ran = [unit for unit, _ in run.host_operations if unit in order]
    assert ran == order, run.host_operations
    assert all(f"{FLAG} info" in unit_text(bed, replica) for replica in REPLICAS)
    assert final == frozenset(urls)
    failed = load.failed()
    figures.add("rollout-rolled", line="rollout", replicas=len(REPLICAS), requests=len(load.sent), failed=len(failed))
    assert failed == [], f"{len(failed)} of {len(load.sent)} requests failed: {failed[:5]}"
    for url in urls:
        assert load.served_while_out(url) > 0, f"no request was answered while {url} was out of the gateway"


def test_a_failed_gate_stops_the_rollout_at_its_replica_and_the_rest_keep_serving(rollout, figures):
    host, ports, gateway_port = rollout
    bed = host.bed
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    before = {replica: unit_text(bed, replica) for replica in REPLICAS}
    assert not any(f"{FLAG} debug" in text for text in before.values())
    state_before = applied(host)
    # The second replica comes back from its restart with an acceptance length below the gate's minimum (2.0).
    configure(bed.tree, engine_behaviour={**{name: BEHAVIOUR for name in REPLICAS},
                                          REPLICAS[1]: {**BEHAVIOUR, "acceptance_length": 1.2}})
    values = rollout_values(bed, ports, gateway_port, "debug")
    with Load(gateway_of(gateway_port), SECRETS["llmApiKey"]) as load:
        run = host.up(values, check=False)
        final = load.ready_workers()
    failed_gate = f"ct129-gate-{REPLICAS[1]}"
    assert run.returncode != 0
    assert set(run.errors()) == {failed_gate}, run.errors()
    assert "acceptance length 1.20 < 2.00" in run.errors()[failed_gate], run.errors()
    changed = run.changed()
    assert changed.get(failed_gate) == "failed", changed
    assert {name: changed.get(name) for name in steps_of(REPLICAS[0])} == \
        {name: "update" for name in steps_of(REPLICAS[0])}, changed
    # The engine started nothing after the failed gate: not its put-back, not a step of the third replica.
    assert f"ct129-admit-{REPLICAS[1]}" not in changed
    assert not any(name.endswith(REPLICAS[2]) for name in changed), changed
    ran = [unit for unit, _ in run.host_operations]
    assert ran[-1] == failed_gate, run.host_operations
    assert not any(unit.endswith(REPLICAS[2]) for unit in ran), run.host_operations
    assert f"ct129-admit-{REPLICAS[1]}" not in ran
    # The state keeps what was last applied to every unit the rollout did not reach.
    state_after = applied(host)
    untouched = [name for name in state_before if name.endswith(REPLICAS[2]) or name == f"ct129-admit-{REPLICAS[1]}"]
    assert len(untouched) == len(STEPS) + 2, untouched  # the third replica's steps and environment, r1's put-back
    assert {name: state_after[name] for name in untouched} == {name: state_before[name] for name in untouched}
    # The first replica runs the new command line and serves; the third keeps the old one, in the gateway.
    assert f"{FLAG} debug" in unit_text(bed, REPLICAS[0])
    assert f"{FLAG} debug" in unit_text(bed, REPLICAS[1])
    assert unit_text(bed, REPLICAS[2]) == before[REPLICAS[2]]
    assert final == frozenset({urls[0], urls[2]}), final
    failed = load.failed()
    stopped = failed_gate in run.errors() and final == frozenset({urls[0], urls[2]})
    figures.add("rollout-gate-failure", line="rollout-gate-failure", requests=len(load.sent), failed=len(failed),
                stopped_at_its_replica="yes" if stopped else "no")
    assert failed == [], f"{len(failed)} of {len(load.sent)} requests failed: {failed[:5]}"
    assert load.served_while_out(urls[1]) > 0
