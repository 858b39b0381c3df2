"""Rotated secrets and a failing deploy gate through the real engine.

A refresh configures the provider with the config the last `up` saved in the state, not the stack's current one, so
after a rotated SSH key the refresh dials with the old key; the preview still works and shows every unit as not
read, and `up`, whose steps get the current config, reads and converges with the new key. A rotated API key shows as
a change of the services that read it, and `up` rewrites their key files. A failed gate fails `up`, and
`pulumi stack output` then shows the gate's last pass, named so and dated, never a verdict on what failed. A state
edited by someone without the stack's SSH key runs nothing on the host: not its probes on a refresh, not its
teardowns on a destroy.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from realengine import Stack, urn_name
from sshhost import free_port
from sshhost.bed import SECRETS, Bed

pytestmark = pytest.mark.pulumi


def test_a_rotated_ssh_key_is_previewed_and_applied(project, tmp_path):
    bed = Bed.seed(tmp_path / "host")
    try:
        stack = Stack(project, "ssh-rotation", "kpro5", bed.values(), bed.secrets())
        stack.up()
        new = tmp_path / "id_ed25519_new"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(new)], check=True)
        # The host takes only the new key from now on.
        (bed.ssh.workdir / "authorized_keys").write_text(new.with_suffix(".pub").read_text())
        stack.set_secret("sshPrivateKey", new.read_text())

        preview = stack.preview()
        changed = preview.changed()
        assert changed and {op for op, _ in changed.values()} == {"update"}, changed
        value = next(iter(preview.facts("vfio-binding").values()))
        assert "refused the key of gpuhosts:sshPrivateKey" in value and "was rotated" in value, value
        up = stack.up()
        assert set(up.changed()) == set(changed)
        assert {script for _, script in up.host_operations} == {"ensure"}
        assert stack.preview().changed() == {}
        assert new.read_text().strip() not in str(stack.export())
    finally:
        bed.close()


def test_a_rotated_api_key_is_previewed_and_applied_and_a_failed_gate_leaves_its_last_pass(project, sglang, tmp_path,
                                                                                        figures):
    bed = Bed.seed(tmp_path / "host")
    try:
        stack = Stack(project, "api-rotation", "kpro5", bed.services_values(sglang.port, free_port()), bed.secrets())
        stack.up()
        passed = stack.outputs()["services"]["qwen-sglang"]["lastPassedGate"]
        assert passed["passed"] is True and passed["measuredAt"], passed

        rotated = "sk-rotated-key-51c0de"
        stack.set_secret("llmApiKey", rotated)
        changed = stack.preview().changed()
        # The refresh reads the key files with the key the last `up` saved (the engine configures the provider from
        # the state), which they still hold: the rotation shows as the keyed digest of the new key alone.
        assert changed == {"ct129-service-qwen-sglang": ("update", ["secret.digest"]),
                           "ct129-service-qwen-vllm-dflash": ("update", ["secret.digest"])}, changed
        sglang.engine.key = rotated  # the engine takes the key its restarted service reads
        up = stack.up()
        assert {"ct129-service-qwen-sglang", "ct129-service-qwen-vllm-dflash"} <= set(up.changed())
        key_file = bed.tree / "var/lib/lxc/129/rootfs/etc/gpuhosts/qwen-sglang.env"
        assert key_file.read_text() == f"GPUHOSTS_API_KEY={rotated}\n"
        assert stack.preview().changed() == {}
        state = str(stack.export())
        assert stack.outputs()["services"]["qwen-sglang"]["lastPassedGate"]["passed"] is True
        assert rotated not in state and SECRETS["llmApiKey"] not in state

        before = stack.outputs()["services"]["qwen-sglang"]["lastPassedGate"]
        stack.set_path("services[0].gate.minAcceptanceLength", 9.0)
        failed = stack.up(check=False)
        assert failed.returncode != 0 and failed.changed().get("ct129-gate-qwen-sglang") == "failed"
        errors = "\n".join(failed.diagnostics("error"))
        assert "acceptance length 3.40 < 9.00" in errors and "Traceback" not in errors, errors
        after = stack.outputs()["services"]["qwen-sglang"]
        assert "gate" not in after and after["lastPassedGate"] == before
        figures.add("faults-gate", line="pulumi-faults", failed_gate_output="lastPassedGate(unchanged,dated)")
    finally:
        bed.close()


def test_a_state_edited_without_the_stacks_key_runs_nothing_on_the_host(project, tmp_path):
    bed = Bed.seed(tmp_path / "host")
    try:
        stack = Stack(project, "state-edit", "kpro5", bed.values(), bed.secrets())
        stack.up()
        planted = tmp_path / "planted"

        def edit(change) -> None:
            """Whoever may write the state backend, but holds no stack secret: the inputs and the outputs alike
            changed, and the state imported."""
            state = stack.export()
            for entry in state["deployment"]["resources"]:
                for section in ("inputs", "outputs"):
                    if "probe" in (entry.get(section) or {}):
                        change(urn_name(entry["urn"]), entry[section])
            stack.pulumi("stack", "import", input=json.dumps(state))

        def plant_probe(name, props) -> None:
            if name == "vfio-binding":
                props["probe"] = f"touch {planted}-probe\n" + props["probe"]

        edit(plant_probe)
        preview = stack.preview()
        assert set(preview.changed()) == {"vfio-binding"}, preview.changed()
        (fact,) = set(preview.facts("vfio-binding").values())
        assert "its probe did not run" in fact and "do not match their signature" in fact, fact
        assert not list(tmp_path.glob("planted*"))
        # `up` runs the unit's ensure from the program, which signs it again.
        up = stack.up()
        assert up.host_operations == [("vfio-binding", "ensure")], up.host_operations
        assert stack.preview().changed() == {}

        edit(lambda name, props: props.update(teardown=f"touch {planted}-teardown\n" + props["teardown"]))
        destroy = stack.destroy(check=False)
        assert destroy.returncode != 0
        errors = "\n".join(destroy.diagnostics("error"))
        assert "teardown: nothing ran" in errors and "GPUHOSTS_TRUST_UNSIGNED_STATE=1" in errors, errors
        assert destroy.host_operations == [] and not list(tmp_path.glob("planted*"))
    finally:
        bed.close()
