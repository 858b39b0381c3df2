"""kpro5 with its inference services, over SSH: secrets travel only on stdin, the deploy gate runs after the
service and again only when the service changed, downloads start without waiting for an engine, destroy keeps
the weights.

The tests search the provider's log, the state, the plan and the host's files for the secret values.
"""

from __future__ import annotations

import json

import pytest

from engine_standin import Engine as EngineStandin, start_engine
from sshhost import free_port
from sshhost.bed import SECRETS, Bed, names



def service_units(values: dict) -> list[str]:
    """The units the services add to the host's own, read from the plan."""
    from gpuhosts.plans.proxmox_host import plan_host
    from gpuhosts.stacks import validate_stack

    secrets = {"sshPrivateKey", *SECRETS}
    host_only = {k: v for k, v in values.items() if k != "services"}
    return sorted(set(plan_host(validate_stack(values, secrets)).units)
                  - set(plan_host(validate_stack(host_only, secrets)).units))


KEY_FILES = ("var/lib/lxc/129/rootfs/etc/gpuhosts/qwen-sglang.env",
             "var/lib/lxc/129/rootfs/etc/gpuhosts/qwen-vllm-dflash.env")


@pytest.fixture
def bed(tmp_path):
    bed = Bed.seed(tmp_path / "bed")
    yield bed
    bed.close()


@pytest.fixture
def ports():
    return free_port(), free_port()


@pytest.fixture
def engine(ports):
    server = start_engine(EngineStandin(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=SECRETS["llmApiKey"]),
                          ports[0])
    yield server
    server.shutdown()
    server.server_close()


def leaks(bed: Bed, plans: list) -> list[str]:
    """Every file of the host, the plans, the provider's log and the state that holds a secret value, apart from
    the services' key files."""
    places = [p for p in bed.tree.rglob("*") if p.is_file() and not p.is_symlink()
              and str(p.relative_to(bed.tree)) not in KEY_FILES]
    places += [p for plan in plans for p in plan.rglob("*") if p.is_file()]
    places += [bed.engine.state_file]
    found = [str(p) for p in places for value in SECRETS.values() if value.encode() in p.read_bytes()]
    found += [f"provider log: {line}" for line in bed.engine.log for value in SECRETS.values() if value in line]
    return found


def test_up_again_and_destroy_with_services(bed, ports, engine):
    values = bed.services_values(*ports)
    plan = bed.plan(values)
    first = bed.up(values)
    created = names(first, "create")
    assert set(service_units(values)) <= set(created) and created[-1] == "ct129-gate-qwen-sglang", created
    # The downloads did not wait for the engines' environments: both ran in the same wave as them.
    state = {e["name"]: e for e in bed.engine.state().values()}
    env_urn = next(u for u, e in bed.engine.state().items() if e["name"] == "ct129-env-qwen-sglang")
    assert env_urn not in state["ct129-model-qwen3-6-27b"]["dependencies"]
    gate = state["ct129-gate-qwen-sglang"]["outputs"]["report"]
    assert gate["passed"] and gate["acceptance_length"] == pytest.approx(3.4), gate
    downloads = (bed.tree / "var/log/fakehost/hf.log").read_text()
    assert "z-lab/Qwen3.6-27B-DFlash@main -> /srv/models/Qwen3.6-27B-DFlash fetched=2 reused=0 token=yes rc=0" in downloads
    key_file = bed.tree / KEY_FILES[0]
    assert key_file.read_text() == f"GPUHOSTS_API_KEY={SECRETS['llmApiKey']}\n"

    again = bed.up(values)
    assert names(again) == []

    # A changed service re-runs its own unit and its gate, nothing else.
    values["services"][0]["contextLength"] = 65536
    changed_plan = bed.plan(values)
    changed = bed.up(values)
    assert names(changed) == ["ct129-service-qwen-sglang", "ct129-gate-qwen-sglang"]
    assert all(op.operation == "update" for op in changed if op.operation != "read")

    stored = bed.engine.state()
    gone = names(bed.destroy())
    # The container's units go gate first (the host's monitoring files wait on nothing of the container's, so
    # they may go at any point).
    assert [name for name in gone if name.startswith("ct129-")][:2] == ["ct129-gate-qwen-sglang",
                                                                       "ct129-service-qwen-sglang"]
    assert set(service_units(values)) <= set(gone)
    position = {name: index for index, name in enumerate(gone)}
    for entry in stored.values():
        for dependency in entry["dependencies"]:
            if dependency in stored and entry["name"] in position:
                assert position[entry["name"]] < position[stored[dependency]["name"]], (entry["name"], dependency)
    assert json.loads((bed.tree / "var/lib/lxc/129/rootfs/srv/models/Qwen3.6-27B/config.json").read_text())
    assert not key_file.exists()
    assert leaks(bed, [plan, changed_plan]) == []
