"""The inference-service units run against the simulated kpro5 (tests/fakehost): container 129 gets uv
environments, the downloads and the units; the deploy gate measures an engine stand-in; destroy keeps the weights.

Secrets reach each ensure on stdin, as the host-unit provider sends them; the tests then search everything the
commands printed and every file of the host for them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuhosts.plans.proxmox_host import plan_host
from conftest import KPRO5_SECRETS, READY_CAP_S, kpro5_values
from engine_standin import Engine, start_engine
from fakehost import host_env
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5, tree_digest, tree_listing
from fakehost.util import configure
from gpuhosts.stacks import validate_stack
from gpuhosts.locks import lock_digest, lock_spec, lock_text
from gpuhosts.plans.model_download import HF_REQUIREMENT, TOOLS_PYTHON
from gpuhosts.protocol import ProtocolError, parse_facts, parse_result
from gpuhosts.provider import refreshed_facts
from gpuhosts.units import Unit
from sshhost import free_port
from services_data import API_KEY, HF_TOKEN, SECRETS

VERSION = "580.126.09"
# A probe must change nothing, not even under run/ (a lock file, a reboot marker); only the stand-ins' own logs
# of what they were asked may differ.
STAND_IN_LOGS = ("var/log/fakehost",)
CT = "var/lib/lxc/129/rootfs"


def host_unit_keys() -> set[str]:
    values = kpro5_values()
    values.pop("services")
    values.pop("benchmarks", None)  # a benchmark compares services: none without them
    return set(plan_host(validate_stack(values, KPRO5_SECRETS)).units)


HOST_UNITS = host_unit_keys()


def service_units(units: list[Unit]) -> list[Unit]:
    """The units a stack's services add to the host's own, in apply order."""
    return [u for u in units if u.key not in HOST_UNITS]


def weights_on_host(values: dict) -> None:
    values["containers"][0]["modelStore"] = {"hostPath": "/tank/models"}
    for service in values["services"]:
        service["weightsOn"] = "host"


def host_store(tree: Path) -> None:
    """What weightsOn: host needs of the host: the store's directory, and a python3 for the downloads' own hf
    environment, which then lives on the host's side. The seed gives only the container a python3 stand-in."""
    (tree / "tank").mkdir()
    shutil.copy(tree / CT / "usr/bin/python3", tree / "usr/bin/python3")


@dataclass
class Host:
    tree: Path
    run_file: Path
    sha256: str
    sglang_port: int
    vllm_port: int

    def values(self, services: bool = True) -> dict:
        values = kpro5_values()
        values["nvidia"].update(url=f"file://{self.run_file}", sha256=self.sha256)
        if not services:
            values.pop("services")
            values.pop("benchmarks", None)  # a benchmark compares services: none without them
            return values
        sglang, vllm = values["services"]
        # The gate talks to 127.0.0.1 of the machine running the tests: ports of our own, quick timeouts.
        sglang.update(port=self.sglang_port, bind="127.0.0.1")
        vllm.update(port=self.vllm_port, bind="127.0.0.1")
        for service in values["services"]:
            service["gate"].update(readyTimeoutS=READY_CAP_S, maxTokens=64)
        return values

    def units(self, values: dict) -> list[Unit]:
        return plan_host(validate_stack(values, KPRO5_SECRETS)).apply_order

    def service_units(self, values: dict | None = None) -> list[Unit]:
        return service_units(self.units(values or self.values()))

    def run(self, unit: Unit, operation: str = "ensure") -> subprocess.CompletedProcess:
        stdin = SECRETS[unit.stdin_secret] + "\n" if unit.stdin_secret and operation == "ensure" else ""
        return subprocess.run(["bash", "-c", getattr(unit, operation)], input=stdin, capture_output=True, text=True,
                              env=host_env(self.tree), timeout=180)

    def apply(self, unit: Unit, operation: str = "ensure") -> str:
        result = self.run(unit, operation)
        assert result.returncode == 0, f"{unit.key} {operation} failed:\n{result.stdout}\n{result.stderr}"
        # Every ensure and teardown that succeeds ends with its result line (the provider fails a unit without one).
        parse_result(result.stdout)
        return result.stdout + result.stderr

    def up(self, values: dict | None = None) -> dict[str, str]:
        return {unit.key: self.apply(unit) for unit in self.service_units(values)}

    def destroy(self, values: dict | None = None) -> dict[str, str]:
        return {unit.key: self.apply(unit, "teardown") for unit in reversed(self.service_units(values))}

    def unit(self, key: str, values: dict | None = None) -> Unit:
        (found,) = [u for u in self.service_units(values) if u.key == key]
        return found

    def probe_output(self, unit: Unit) -> dict:
        """Everything the unit's probe reports, observations included; the probe must leave the host as it found
        it."""
        before = tree_digest(self.tree, exclude=STAND_IN_LOGS)
        result = subprocess.run(["bash", "-c", unit.probe], capture_output=True, text=True, env=host_env(self.tree),
                                timeout=60)
        assert result.returncode == 0, f"{unit.key} probe failed:\n{result.stdout}\n{result.stderr}"
        assert tree_digest(self.tree, exclude=STAND_IN_LOGS) == before, f"{unit.key}'s probe changed the host"
        return parse_facts(result.stdout)

    def probe(self, unit: Unit) -> dict:
        """The facts as a refresh stores them: observations (minors, dynamic majors) left out, a key file compared
        with the secret the provider would have."""
        return refreshed_facts(unit.desired, self.probe_output(unit), unit.key, SECRETS.get)[0]

    def ct(self, path: str) -> Path:
        return self.tree / CT / path.lstrip("/")

    def settings(self, **knobs) -> None:
        configure(self.tree, **knobs)

    def hf_log(self) -> list[str]:
        log = self.tree / "var/log/fakehost/hf.log"
        return log.read_text().splitlines() if log.exists() else []

    def unit_state(self, unit: str) -> tuple[str, str]:
        def systemctl(verb: str) -> str:
            return subprocess.run(["pct", "exec", "129", "--", "systemctl", verb, unit], capture_output=True,
                                  text=True, env=host_env(self.tree)).stdout.strip()
        return systemctl("is-active"), systemctl("is-enabled")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Host:
    """kpro5 with its host units converged (driver, devices, container user space): where services start."""
    root = tmp_path_factory.mktemp("services")
    run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    host = Host(seed_kpro5(root / "kpro5"), run_file, make_fake_run(run_file, VERSION), free_port(), free_port())
    for unit in host.units(host.values(services=False)):
        host.apply(unit)
    return host


@pytest.fixture
def host(prepared, tmp_path) -> Host:
    tree = tmp_path / "kpro5"
    shutil.copytree(prepared.tree, tree, symlinks=True)
    # Ports of this test's own: a port picked once per module could be taken by another process in between.
    return Host(tree, prepared.run_file, prepared.sha256, free_port(), free_port())


@pytest.fixture
def engine(host):
    """A healthy SGLang with MTP on the SGLang service's port (acceptance length 3.4 of 4)."""
    server = start_engine(Engine(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=API_KEY), host.sglang_port)
    yield server
    server.shutdown()
    server.server_close()


def secrets_found(host: Host, texts: list[str]) -> list[str]:
    """Every place a secret shows up, except the one file meant to hold the API key."""
    allowed = {host.ct("/etc/gpuhosts/qwen-sglang.env"), host.ct("/etc/gpuhosts/qwen-vllm-dflash.env")}
    found = [f"output #{i}" for i, text in enumerate(texts) if HF_TOKEN in text or API_KEY in text]
    for path in host.tree.rglob("*"):
        if path.is_file() and not path.is_symlink() and path not in allowed:
            data = path.read_bytes()
            if HF_TOKEN.encode() in data or API_KEY.encode() in data:
                found.append(str(path.relative_to(host.tree)))
    return found


def test_up_builds_envs_downloads_units_and_passes_the_gate(host, engine):
    outputs = host.up()
    order = list(outputs)
    # The stopped vLLM service lets go of the shared GPUs before SGLang starts; the gate measures last.
    assert order.index("ct129-service-qwen-vllm-dflash") < order.index("ct129-service-qwen-sglang"), order
    assert order[-1] == "ct129-gate-qwen-sglang" and order[0].startswith("ct129-env-"), order
    assert all(parse_result(out).changed for key, out in outputs.items() if "-gate-" not in key), outputs
    assert host.ct("/opt/gpuhosts/.uv/bin/uv").exists()
    for name in ("qwen-sglang", "qwen-vllm-dflash"):
        assert host.ct(f"/opt/gpuhosts/{name}/venv/bin/hf").exists(), name
    # The downloads bring their own hf, installed from its lock, whatever the engines depend on.
    hf_lock = lock_text(lock_spec(HF_REQUIREMENT, TOOLS_PYTHON))
    assert host.ct("/opt/gpuhosts/downloads/venv/.gpuhosts-requirement").read_text() == \
        f"{HF_REQUIREMENT} lock:{lock_digest(hf_lock)}\n"
    assert host.ct("/opt/gpuhosts/downloads/requirements.lock").read_text() == hf_lock
    assert json.loads(host.ct("/srv/models/Qwen3.6-27B/config.json").read_text())["num_hidden_layers"] == 64
    assert "agrees with the plan" in outputs["ct129-model-qwen3-6-27b-dflash"]
    assert host.unit_state("gpuhosts-qwen-sglang.service") == ("active", "enabled")
    assert host.unit_state("gpuhosts-qwen-vllm-dflash.service")[0] != "active"
    env_file = host.ct("/etc/gpuhosts/qwen-sglang.env")
    assert env_file.read_text() == f"GPUHOSTS_API_KEY={API_KEY}\n" and oct(env_file.stat().st_mode & 0o777) == "0o600"
    # SGLang's admin endpoints get a key of their own, made in the container; vLLM has none.
    admin_file = host.ct("/etc/gpuhosts/qwen-sglang.admin.env")
    assert re.fullmatch(r"GPUHOSTS_ADMIN_API_KEY=[A-Za-z0-9_-]{32}\n", admin_file.read_text())
    assert oct(admin_file.stat().st_mode & 0o777) == "0o600" and API_KEY not in admin_file.read_text()
    assert not host.ct("/etc/gpuhosts/qwen-vllm-dflash.admin.env").exists()
    gate = parse_result(outputs["ct129-gate-qwen-sglang"])
    assert not gate.reboot_required
    results = gate.report
    assert results["passed"] and results["acceptance_length"] == pytest.approx(3.4)
    assert results["decode_tokens_per_s"] > 20


def test_second_up_changes_nothing_and_no_secret_leaks(host, engine):
    first = host.up()
    listing = tree_listing(host.tree)
    second = host.up()
    for name, output in second.items():
        if "-gate-" not in name:
            assert not parse_result(output).changed, f"{name}:\n{output}"
    after = tree_listing(host.tree)
    assert {k: v for k, v in after.items() if listing.get(k) != v} == {}
    assert set(listing) == set(after)
    assert [line for line in host.hf_log() if "fetched=0" not in line][2:] == []
    assert secrets_found(host, list(first.values()) + list(second.values())) == []
    assert not list((host.tree / CT / "run/gpuhosts").glob("hf-token*"))


def test_an_interrupted_download_resumes_where_it_stopped(host):
    # A download needs no engine environment: it runs first, on the bare container.
    download = host.unit("ct129-model-qwen3-6-27b")
    host.settings(hf_fail_after_files=2)
    failed = host.run(download)
    assert failed.returncode == 1 and "run again to resume" in failed.stderr
    assert not host.ct("/srv/models/Qwen3.6-27B/.gpuhosts-download").exists()
    host.settings(hf_fail_after_files=None)
    resumed = host.apply(download)
    assert "changed: downloaded Qwen/Qwen3.6-27B@main" in resumed and parse_result(resumed).changed
    assert not host.ct("/opt/gpuhosts/qwen-sglang").exists()
    last = host.hf_log()[-1]
    assert "reused=" in last and "reused=0" not in last, last


def test_a_drafter_trained_on_other_layers_is_refused(host):
    drafter = "z-lab/Qwen3.6-27B-DFlash"
    registry = json.loads((host.tree / "var/lib/fakehost/settings.json").read_text()).get("hf_repos") or {}
    config = {"num_hidden_layers": 5, "dflash_config": {"target_layer_ids": [2, 17, 32, 47, 62], "block_size": 16},
              "layer_types": ["sliding_attention"] * 4 + ["full_attention"]}
    host.settings(hf_repos={**registry, drafter: {"gated": True, "files": {
        "config.json": json.dumps(config), "model.safetensors": 4096}}})
    result = host.run(host.unit("ct129-model-qwen3-6-27b-dflash"))
    assert result.returncode == 1
    assert "[2, 17, 32, 47, 62] differ from [1, 16, 31, 46, 61]" in result.stderr
    with pytest.raises(ProtocolError):
        parse_result(result.stdout)


def test_the_gate_fails_the_seeds_one_percent_acceptance(host):
    server = start_engine(Engine(kind="sglang", sglang_length=1.04, sglang_rate=0.011, key=API_KEY), host.sglang_port)
    try:
        units = host.service_units()
        for unit in units[:-1]:
            host.apply(unit)
        result = host.run(units[-1])
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 1
    assert "acceptance length 1.04 < 2.00" in result.stdout and "deploy gate of qwen-sglang failed" in result.stderr
    # A failed gate reports no result: the deployment stops there.
    with pytest.raises(ProtocolError):
        parse_result(result.stdout)


def test_switching_the_enabled_service_stops_the_other_first(host, engine):
    host.up()
    values = host.values()
    values["services"][0]["enabled"], values["services"][1]["enabled"] = False, True
    units = host.service_units(values)
    names = [u.key for u in units]
    assert names.index("ct129-service-qwen-sglang") < names.index("ct129-service-qwen-vllm-dflash")
    assert "ct129-service-qwen-sglang" in host.unit("ct129-service-qwen-vllm-dflash", values).needs
    for unit in units[:-1]:
        host.apply(unit)
    assert host.unit_state("gpuhosts-qwen-sglang.service") == ("inactive", "disabled")
    assert host.unit_state("gpuhosts-qwen-vllm-dflash.service") == ("active", "enabled")


def test_destroy_removes_what_it_added_and_keeps_the_weights(host, engine):
    kept = ("run", "proc/sys/kernel/random/boot_id", "var/log/fakehost", f"{CT}/run", f"{CT}/srv/models")
    before = tree_listing(host.tree, exclude=kept)
    host.up()
    outputs = host.destroy()
    assert "keeping /srv/models/Qwen3.6-27B" in outputs["ct129-model-qwen3-6-27b"]
    assert json.loads(host.ct("/srv/models/Qwen3.6-27B/config.json").read_text())["num_hidden_layers"] == 64
    assert host.ct("/srv/models/Qwen3.6-27B-DFlash/config.json").exists()
    assert not host.ct("/opt/gpuhosts").exists() or not any(host.ct("/opt/gpuhosts").iterdir())
    after = tree_listing(host.tree, exclude=kept)
    assert {k: v for k, v in after.items() if before.get(k) != v} == {}
    assert set(before) == set(after)
    second = host.destroy()
    assert not any(parse_result(out).changed for out in second.values()), second


def test_delete_on_destroy_removes_only_that_download(host, engine):
    values = host.values()
    values["services"][1]["speculative"]["drafter"]["deleteOnDestroy"] = True
    host.up(values)
    host.destroy(values)
    assert not host.ct("/srv/models/Qwen3.6-27B-DFlash").exists()
    assert host.ct("/srv/models/Qwen3.6-27B/config.json").exists()


def test_weights_on_host_storage_survive_in_the_host_directory(host, engine):
    host_store(host.tree)
    values = host.values()
    weights_on_host(values)
    outputs = host.up(values)
    assert "mounted /tank/models at /srv/models in container 129" in outputs["ct129-model-store"]
    assert json.loads((host.tree / "tank/models/Qwen3.6-27B/config.json").read_text())["num_hidden_layers"] == 64
    # The downloads ran on the host's side, with an hf environment there.
    assert (host.tree / "opt/gpuhosts/downloads/venv/bin/hf").exists()
    assert not host.ct("/opt/gpuhosts/downloads").exists()
    host.destroy(values)
    config = (host.tree / "etc/pve/lxc/129.conf").read_text()
    assert "/tank/models" not in config
    assert (host.tree / "tank/models/Qwen3.6-27B/config.json").exists()
    assert not (host.tree / "opt/gpuhosts").exists()
    # Unmounted, the container's own disk shows it never held the weights.
    assert sorted(p.name for p in host.ct("/srv/models").iterdir()) == ["README"]


def test_a_link_planted_for_the_store_marker_is_refused_and_not_followed(host):
    """The attack first: the store folder is the container's (its root maps to 100000 on the host), so the
    container's root may leave `.gpuhosts-model-store` as a link to a host path; the host's root then wrote through
    it and handed the file to the container."""
    host_store(host.tree)
    values = host.values()
    weights_on_host(values)
    store = host.tree / "tank/models"
    store.mkdir()
    victim = host.tree / "etc/cron.d/planted"
    victim.parent.mkdir(parents=True, exist_ok=True)
    (store / ".gpuhosts-model-store").symlink_to("../../etc/cron.d/planted")
    result = host.run(host.unit("ct129-model-store", values))
    assert result.returncode == 1 and "is a symbolic link" in result.stderr, result.stdout + result.stderr
    assert not victim.exists()


def test_a_failed_engine_install_is_retried_on_the_next_run(host):
    env = host.unit("ct129-env-qwen-sglang")
    host.settings(uv_fail_install=True)
    failed = host.run(env)
    assert failed.returncode != 0 and "Failed to fetch" in failed.stdout + failed.stderr
    host.settings(uv_fail_install=None)
    assert "installed sglang[all]==0.5.11" in host.apply(env)
    assert not parse_result(host.apply(env)).changed


VARIANTS = {"kpro5": None, "weights-on-host": weights_on_host}


def variant_values(host: Host, variant: str) -> dict:
    values = host.values()
    if VARIANTS[variant] is not None:
        VARIANTS[variant](values)
    return values


def probe_cases() -> list:
    cases = []
    for variant, mutate in VARIANTS.items():
        values = kpro5_values()
        if mutate is not None:
            mutate(values)
        for unit in service_units(plan_host(validate_stack(values, KPRO5_SECRETS)).apply_order):
            cases.append(pytest.param(variant, unit.key, id=f"{variant}/{unit.key}"))
    return cases


@pytest.fixture(scope="module")
def served(prepared, tmp_path_factory):
    """Per variant, container 129's services converged once (the gate against an engine stand-in, which keeps
    serving for the gate's probe); read-only use."""
    hosts: dict[str, Host] = {}
    servers = []

    def get(variant: str) -> Host:
        if variant not in hosts:
            tree = tmp_path_factory.mktemp(variant) / "kpro5"
            shutil.copytree(prepared.tree, tree, symlinks=True)
            if VARIANTS[variant] is weights_on_host:
                host_store(tree)
            host = Host(tree, prepared.run_file, prepared.sha256, free_port(), free_port())
            servers.append(start_engine(Engine(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=API_KEY),
                                        host.sglang_port))
            host.up(variant_values(host, variant))
            hosts[variant] = host
        return hosts[variant]

    yield get
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("variant, key", probe_cases())
def test_after_up_the_probe_reports_the_desired_facts_and_changes_nothing(served, variant, key):
    host = served(variant)
    unit = host.unit(key, variant_values(host, variant))
    assert host.probe(unit) == unit.desired


@pytest.mark.parametrize("variant, key", [c for c in probe_cases() if "-gate-" not in c.values[1]])
def test_before_up_the_probe_reports_drift_in_the_same_facts(prepared, variant, key):
    unit = prepared.unit(key, variant_values(prepared, variant))
    assert unit.desired, f"{key} declares no fact"
    observed = prepared.probe(unit)
    assert set(observed) == set(unit.desired)
    assert observed != unit.desired, f"{key} reads as in sync before its ensure ran"


def test_a_service_stopped_by_hand_is_drift_its_ensure_repairs(host, engine):
    host.up()
    unit = host.unit("ct129-service-qwen-sglang")
    assert subprocess.run(["pct", "exec", "129", "--", "systemctl", "stop", "gpuhosts-qwen-sglang.service"],
                          env=host_env(host.tree), capture_output=True).returncode == 0
    facts = host.probe(unit)
    assert {k: v for k, v in facts.items() if unit.desired[k] != v} == {
        "systemd gpuhosts-qwen-sglang.service": "enabled inactive"}
    assert parse_result(host.apply(unit)).changed
    assert host.probe(unit) == unit.desired


def test_a_stopped_container_is_reported_by_every_fact_observed_inside_it(served):
    host = served("kpro5")
    unit = host.unit("ct129-env-qwen-sglang")
    copy = Host(host.tree.parent / "stopped", host.run_file, host.sha256, 0, 0)
    shutil.copytree(host.tree, copy.tree, symlinks=True)
    assert subprocess.run(["pct", "stop", "129"], env=host_env(copy.tree), capture_output=True).returncode == 0
    assert copy.probe(unit) == {name: "container 129 stopped" for name in unit.desired}
