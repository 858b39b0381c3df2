"""The inference-service steps run against the simulated kpro5 (tests/fakehost): container 129 gets uv
environments, the downloads and the units; the deploy gate measures an engine stand-in; destroy keeps the weights.

Secrets reach each command on stdin, as pulumi-command sends them; the tests then search everything the commands
printed and every file of the host for them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.deploy_gate import parse_gate_output
from components.proxmox_host import plan_host
from conftest import KPRO5_SECRETS, kpro5_values
from engine_standin import Engine, start_engine
from fakehost import host_env
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5, tree_listing
from fakehost.util import configure
from gpuhosts.config import validate_stack
from gpuhosts.render import Step
from sshhost import free_port

VERSION = "580.126.09"
HF_TOKEN = "hf_ServiceTestToken5f9d2c"
API_KEY = "sk-service-test-key-81b3e7"
SECRETS = {"hfToken": HF_TOKEN, "llmApiKey": API_KEY}
CT = "var/lib/lxc/129/rootfs"



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
            return values
        sglang, vllm = values["services"]
        # The gate talks to 127.0.0.1 of the machine running the tests: ports of our own, quick timeouts.
        sglang.update(port=self.sglang_port, bind="127.0.0.1")
        vllm.update(port=self.vllm_port, bind="127.0.0.1")
        for service in values["services"]:
            service["gate"].update(readyTimeoutS=30, maxTokens=64)
        return values

    def steps(self, values: dict) -> list[Step]:
        return plan_host(validate_stack(values, KPRO5_SECRETS)).steps

    def service_steps(self, values: dict | None = None) -> list[Step]:
        values = values or self.values()
        host_steps = {s.name for s in self.steps(self.values(services=False))}
        return [s for s in self.steps(values) if s.name not in host_steps]

    def run(self, step: Step, operation: str = "create") -> subprocess.CompletedProcess:
        stdin = SECRETS[step.stdin_secret] + "\n" if step.stdin_secret and operation == "create" else ""
        return subprocess.run(["bash", "-c", getattr(step, operation)], input=stdin, capture_output=True, text=True,
                              env=host_env(self.tree), timeout=180)

    def apply(self, step: Step, operation: str = "create") -> str:
        result = self.run(step, operation)
        assert result.returncode == 0, f"{step.name} {operation} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout + result.stderr

    def up(self, values: dict | None = None) -> dict[str, str]:
        return {step.name: self.apply(step) for step in self.service_steps(values)}

    def destroy(self, values: dict | None = None) -> dict[str, str]:
        return {step.name: self.apply(step, "delete") for step in reversed(self.service_steps(values))}

    def step(self, suffix: str, values: dict | None = None) -> Step:
        (found,) = [s for s in self.service_steps(values) if s.name.endswith(suffix)]
        return found

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
    for step in host.steps(host.values(services=False)):
        host.apply(step)
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
    assert list(outputs) == [
        "kpro5-ct129-env-qwen-sglang", "kpro5-ct129-env-qwen-vllm-dflash", "kpro5-ct129-model-qwen3-6-27b",
        "kpro5-ct129-model-qwen3-6-27b-dflash", "kpro5-ct129-service-qwen-vllm-dflash",
        "kpro5-ct129-service-qwen-sglang", "kpro5-ct129-gate-qwen-sglang"]
    assert host.ct("/opt/gpuhosts/.uv/bin/uv").exists()
    for name in ("qwen-sglang", "qwen-vllm-dflash"):
        assert host.ct(f"/opt/gpuhosts/{name}/venv/bin/hf").exists(), name
    assert json.loads(host.ct("/srv/models/Qwen3.6-27B/config.json").read_text())["num_hidden_layers"] == 64
    assert "agrees with the plan" in outputs["kpro5-ct129-model-qwen3-6-27b-dflash"]
    assert host.unit_state("gpuhosts-qwen-sglang.service") == ("active", "enabled")
    assert host.unit_state("gpuhosts-qwen-vllm-dflash.service")[0] != "active"
    env_file = host.ct("/etc/gpuhosts/qwen-sglang.env")
    assert env_file.read_text() == f"GPUHOSTS_API_KEY={API_KEY}\n" and oct(env_file.stat().st_mode & 0o777) == "0o600"
    results = parse_gate_output(outputs["kpro5-ct129-gate-qwen-sglang"])
    assert results["passed"] and results["acceptance_length"] == pytest.approx(3.4)
    assert results["decode_tokens_per_s"] > 20


def test_second_up_changes_nothing_and_no_secret_leaks(host, engine):
    first = host.up()
    listing = tree_listing(host.tree)
    second = host.up()
    for name, output in second.items():
        if "-gate-" not in name:
            assert "done: no change" in output, f"{name}:\n{output}"
    after = tree_listing(host.tree)
    assert {k: v for k, v in after.items() if listing.get(k) != v} == {}
    assert set(listing) == set(after)
    assert [line for line in host.hf_log() if "fetched=0" not in line][2:] == []
    assert secrets_found(host, list(first.values()) + list(second.values())) == []
    assert not list((host.tree / CT / "run/gpuhosts").glob("hf-token*"))


def test_an_interrupted_download_resumes_where_it_stopped(host):
    for step in host.service_steps()[:2]:
        host.apply(step)
    download = host.step("-model-qwen3-6-27b")
    host.settings(hf_fail_after_files=2)
    failed = host.run(download)
    assert failed.returncode == 1 and "run again to resume" in failed.stderr
    assert not host.ct("/srv/models/Qwen3.6-27B/.gpuhosts-download").exists()
    host.settings(hf_fail_after_files=None)
    assert "changed: downloaded Qwen/Qwen3.6-27B@main" in host.apply(download)
    last = host.hf_log()[-1]
    assert "reused=" in last and "reused=0" not in last, last


def test_a_drafter_trained_on_other_layers_is_refused(host):
    for step in host.service_steps()[:2]:
        host.apply(step)
    drafter = "z-lab/Qwen3.6-27B-DFlash"
    registry = json.loads((host.tree / "var/lib/fakehost/settings.json").read_text()).get("hf_repos") or {}
    config = {"num_hidden_layers": 5, "dflash_config": {"target_layer_ids": [2, 17, 32, 47, 62], "block_size": 16},
              "layer_types": ["sliding_attention"] * 4 + ["full_attention"]}
    host.settings(hf_repos={**registry, drafter: {"gated": True, "files": {
        "config.json": json.dumps(config), "model.safetensors": 4096}}})
    result = host.run(host.step("-model-qwen3-6-27b-dflash"))
    assert result.returncode == 1
    assert "[2, 17, 32, 47, 62] differ from [1, 16, 31, 46, 61]" in result.stderr


def test_the_gate_fails_the_seeds_one_percent_acceptance(host):
    server = start_engine(Engine(kind="sglang", sglang_length=1.04, sglang_rate=0.011, key=API_KEY), host.sglang_port)
    try:
        steps = host.service_steps()
        for step in steps[:-1]:
            host.apply(step)
        result = host.run(steps[-1])
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 1
    assert "acceptance length 1.04 < 2.00" in result.stdout and "deploy gate of qwen-sglang failed" in result.stderr
    assert parse_gate_output(result.stdout)["passed"] is False


def test_switching_the_enabled_service_stops_the_other_first(host, engine):
    host.up()
    values = host.values()
    values["services"][0]["enabled"], values["services"][1]["enabled"] = False, True
    steps = host.service_steps(values)
    names = [s.name for s in steps]
    assert names.index("kpro5-ct129-service-qwen-sglang") < names.index("kpro5-ct129-service-qwen-vllm-dflash")
    for step in steps[:-1]:
        host.apply(step)
    assert host.unit_state("gpuhosts-qwen-sglang.service") == ("inactive", "disabled")
    assert host.unit_state("gpuhosts-qwen-vllm-dflash.service") == ("active", "enabled")


def test_destroy_removes_what_it_added_and_keeps_the_weights(host, engine):
    kept = ("run", "proc/sys/kernel/random/boot_id", "var/log/fakehost", f"{CT}/run", f"{CT}/srv/models")
    before = tree_listing(host.tree, exclude=kept)
    host.up()
    outputs = host.destroy()
    assert "keeping /srv/models/Qwen3.6-27B" in outputs["kpro5-ct129-model-qwen3-6-27b"]
    assert json.loads(host.ct("/srv/models/Qwen3.6-27B/config.json").read_text())["num_hidden_layers"] == 64
    assert host.ct("/srv/models/Qwen3.6-27B-DFlash/config.json").exists()
    assert not host.ct("/opt/gpuhosts").exists() or not any(host.ct("/opt/gpuhosts").iterdir())
    after = tree_listing(host.tree, exclude=kept)
    assert {k: v for k, v in after.items() if before.get(k) != v} == {}
    assert set(before) == set(after)
    second = host.destroy()
    assert all("done: no change" in out or "nothing to remove" in out for out in second.values()), second


def test_delete_on_destroy_removes_only_that_download(host, engine):
    values = host.values()
    values["services"][1]["speculative"]["drafter"]["deleteOnDestroy"] = True
    host.up(values)
    host.destroy(values)
    assert not host.ct("/srv/models/Qwen3.6-27B-DFlash").exists()
    assert host.ct("/srv/models/Qwen3.6-27B/config.json").exists()


def test_weights_on_host_storage_survive_in_the_host_directory(host, engine):
    (host.tree / "tank").mkdir()
    values = host.values()
    values["containers"][0]["modelStore"] = {"hostPath": "/tank/models"}
    for service in values["services"]:
        service["weightsOn"] = "host"
    outputs = host.up(values)
    assert "mounted /tank/models at /srv/models in container 129" in outputs["kpro5-ct129-model-store"]
    assert json.loads((host.tree / "tank/models/Qwen3.6-27B/config.json").read_text())["num_hidden_layers"] == 64
    host.destroy(values)
    config = (host.tree / "etc/pve/lxc/129.conf").read_text()
    assert "/tank/models" not in config
    assert (host.tree / "tank/models/Qwen3.6-27B/config.json").exists()


def test_a_failed_engine_install_is_retried_on_the_next_run(host):
    env = host.step("-env-qwen-sglang")
    host.settings(uv_fail_install=True)
    failed = host.run(env)
    assert failed.returncode != 0 and "Failed to fetch" in failed.stdout + failed.stderr
    host.settings(uv_fail_install=None)
    assert "installed sglang[all]==0.5.11" in host.apply(env)
    assert "done: no change" in host.apply(env)
