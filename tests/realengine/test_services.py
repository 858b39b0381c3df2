"""kpro5 with its inference services through the real Pulumi CLI: the downloads start without waiting for an
engine's environment, the deploy gate runs after its service and again only when the service changed, destroy
tears down in the order the dependencies say and keeps the weights; the secrets reach no file of the host but the
services' key files, and neither the state, the stack file nor the provider's log."""

from __future__ import annotations

import json

import pytest

from realengine import Stack, urn_name
from sshhost import free_port
from sshhost.bed import SECRETS, Bed

pytestmark = pytest.mark.pulumi

KEY_FILES = ("var/lib/lxc/129/rootfs/etc/gpuhosts/qwen-sglang.env",
             "var/lib/lxc/129/rootfs/etc/gpuhosts/qwen-vllm-dflash.env")
MODEL = "var/lib/lxc/129/rootfs/srv/models/Qwen3.6-27B/config.json"


def leaks(bed: Bed, stack: Stack, state: dict) -> list[str]:
    """Each place that holds a secret value: the host's files (the key files apart), the state, the stack file
    and the provider's log."""
    places = {str(p.relative_to(bed.tree)): p.read_bytes() for p in bed.tree.rglob("*")
              if p.is_file() and not p.is_symlink() and str(p.relative_to(bed.tree)) not in KEY_FILES}
    places["state"] = json.dumps(state).encode()
    places["stack file"] = stack.file.read_bytes()
    places["provider log"] = stack.project.provider_log.read_bytes()
    return [f"{place}: {name}" for place, text in places.items() for name, value in SECRETS.items()
            if value.encode() in text]


def test_services_up_again_a_changed_service_and_destroy(project, sglang, tmp_path):
    bed = Bed.seed(tmp_path / "host")
    try:
        stack = Stack(project, "services", "kpro5", bed.services_values(sglang.port, free_port()), bed.secrets())
        first = stack.up()
        created = first.changed()
        assert {"ct129-service-qwen-sglang", "ct129-gate-qwen-sglang", "ct129-model-qwen3-6-27b",
                "ct129-env-qwen-sglang"} <= set(created) and set(created.values()) == {"create"}, created
        resources = stack.resources()
        needs = {name: {urn_name(u) for u in entry.get("dependencies", [])} for name, entry in resources.items()}
        # The downloads did not wait for the engines' environments; the gate waited for its service.
        assert "ct129-env-qwen-sglang" not in needs["ct129-model-qwen3-6-27b"], needs["ct129-model-qwen3-6-27b"]
        assert "ct129-service-qwen-sglang" in needs["ct129-gate-qwen-sglang"]
        ran = [unit for unit, _ in first.host_operations]
        assert ran.index("ct129-service-qwen-sglang") < ran.index("ct129-gate-qwen-sglang"), ran
        report = resources["ct129-gate-qwen-sglang"]["outputs"]["report"]
        assert report["passed"] and report["acceptance_length"] == pytest.approx(3.4), report
        downloads = (bed.tree / "var/log/fakehost/hf.log").read_text()
        assert ("z-lab/Qwen3.6-27B-DFlash@main -> /srv/models/Qwen3.6-27B-DFlash fetched=2 reused=0 token=yes rc=0"
                in downloads), downloads
        assert (bed.tree / KEY_FILES[0]).read_text() == f"GPUHOSTS_API_KEY={SECRETS['llmApiKey']}\n"

        again = stack.up()
        assert again.changed() == {} and again.host_operations == [], (again.changed(), again.host_operations)

        # A changed service runs its own unit and its gate again, nothing else.
        stack.set_path("services[0].contextLength", 65536)
        changed = stack.up()
        assert changed.changed() == {"ct129-service-qwen-sglang": "update", "ct129-gate-qwen-sglang": "update"}
        assert [unit for unit, _ in changed.host_operations] == ["ct129-service-qwen-sglang",
                                                                 "ct129-gate-qwen-sglang"]

        state = stack.export()
        needs = {name: {urn_name(u) for u in entry.get("dependencies", [])}
                 for name, entry in stack.resources().items()}
        gone = stack.destroy()
        torn = [unit for unit, script in gone.host_operations if script == "teardown"]
        assert set(torn) >= {"ct129-gate-qwen-sglang", "ct129-service-qwen-sglang", "ct129-model-qwen3-6-27b"}, torn
        position = {unit: index for index, unit in enumerate(torn)}
        # Each unit goes before every unit it needed.
        assert [(unit, need) for unit in torn for need in needs.get(unit, ()) if need in position
                and position[unit] > position[need]] == []
        assert json.loads((bed.tree / MODEL).read_text())
        assert not (bed.tree / KEY_FILES[0]).exists()
        assert leaks(bed, stack, state) == []
    finally:
        bed.close()
