"""kpro5 with its inference services, over SSH: secrets travel only on stdin, the deploy gate runs after the
service and again only when the service changed, and destroy keeps the weights.

The executor searches nothing itself: these tests read its command log, its state, the plan and the host's files
for the secret values.
"""

from __future__ import annotations

import json

import pytest

from components.deploy_gate import parse_gate_output
from engine_standin import Engine, start_engine
from sshhost.bed import SECRETS, Bed
from sshhost import free_port

SERVICE_COMMANDS = ["kpro5-ct129-env-qwen-sglang", "kpro5-ct129-env-qwen-vllm-dflash", "kpro5-ct129-model-qwen3-6-27b",
                    "kpro5-ct129-model-qwen3-6-27b-dflash", "kpro5-ct129-service-qwen-vllm-dflash",
                    "kpro5-ct129-service-qwen-sglang", "kpro5-ct129-gate-qwen-sglang"]
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
    server = start_engine(Engine(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=SECRETS["llmApiKey"]), ports[0])
    yield server
    server.shutdown()
    server.server_close()


def leaks(bed: Bed, plans: list) -> list[str]:
    """Every file of the host, the plans, the command log and the state that holds a secret value, apart from the
    services' key files."""
    places = [p for p in bed.tree.rglob("*") if p.is_file() and not p.is_symlink()
              and str(p.relative_to(bed.tree)) not in KEY_FILES]
    places += [p for plan in plans for p in plan.rglob("*") if p.is_file()]
    places += [bed.executor.log_file, bed.executor.state_file]
    return [str(p) for p in places for value in SECRETS.values() if value.encode() in p.read_bytes()]


def test_up_again_and_destroy_with_services(bed, ports, engine):
    values = bed.services_values(*ports)
    plan = bed.plan(values)
    first = bed.up(plan=plan)
    assert [r.name for r in first][-len(SERVICE_COMMANDS):] == SERVICE_COMMANDS
    gate = parse_gate_output(first[-1].stdout)
    assert gate["passed"] and gate["acceptance_length"] == pytest.approx(3.4), first[-1].stdout
    downloads = (bed.tree / "var/log/fakehost/hf.log").read_text()
    assert "z-lab/Qwen3.6-27B-DFlash@main -> /srv/models/Qwen3.6-27B-DFlash fetched=2 reused=0 token=yes rc=0" in downloads
    key_file = bed.tree / KEY_FILES[0]
    assert key_file.read_text() == f"GPUHOSTS_API_KEY={SECRETS['llmApiKey']}\n"

    again = bed.up(plan=bed.plan(values))
    assert again == [], [r.name for r in again]

    # A changed service re-runs its own step and its gate, nothing else.
    values["services"][0]["contextLength"] = 65536
    changed_plan = bed.plan(values)
    changed = bed.up(plan=changed_plan)
    assert [(r.name, r.operation) for r in changed] == [("kpro5-ct129-service-qwen-sglang", "update"),
                                                        ("kpro5-ct129-gate-qwen-sglang", "update")]
    assert "restarted gpuhosts-qwen-sglang.service" in changed[0].stdout

    gone = bed.destroy()
    removed = [r.name for r in gone][:len(SERVICE_COMMANDS)]
    assert removed[:3] == ["kpro5-ct129-gate-qwen-sglang", "kpro5-ct129-service-qwen-sglang",
                           "kpro5-ct129-service-qwen-vllm-dflash"]
    assert sorted(removed) == sorted(SERVICE_COMMANDS)
    assert json.loads((bed.tree / "var/lib/lxc/129/rootfs/srv/models/Qwen3.6-27B/config.json").read_text())
    assert not key_file.exists()
    assert leaks(bed, [plan, changed_plan]) == []
