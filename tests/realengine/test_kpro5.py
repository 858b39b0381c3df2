"""kpro5 through the real Pulumi CLI: `pulumi stack init` from the committed stack file, aimed at a simulated Proxmox
host over SSH on loopback, its secrets set with `pulumi config set --secret`; `preview --diff` on the fresh host,
`up`, `up` again with nothing to do, `refresh`, the state as `stack export` shows it, and `destroy` back to the start;
on each Proxmox VE release kpro5 may run (Proxmox VE 9.1 on Debian 13, 8.3 on Debian 12), the stack naming it.
"""

from __future__ import annotations

import json

import pytest

from realengine import Stack, floor_noop_up, run_workflow_preview
from realengine.hosts import differences, entries
from sshhost import free_port
from fakehost.tree import PROFILES, profile_seed
from sshhost.bed import A6000, RTX3090_FUNCTIONS, SECRETS, Bed

pytestmark = pytest.mark.pulumi


@pytest.mark.parametrize("profile", sorted(PROFILES, reverse=True))
def test_kpro5_preview_up_again_refresh_and_destroy(project, sglang, tmp_path, figures, profile):
    bed = Bed.seed(tmp_path / "host", **profile_seed(profile))
    try:
        start = entries(bed.tree)
        values = bed.services_values(sglang.port, free_port())
        values["host"]["proxmoxRelease"] = PROFILES[profile]["release"]
        stack = Stack(project, f"kpro5-{profile}", "kpro5", values, bed.secrets())
        stack_file = stack.file.read_text()
        assert stack_file.count("secure: v1:") == 3 and "encryptionsalt: v1:" in stack_file
        assert not [name for name, value in bed.secrets().items() if value.strip() in stack_file]

        preview = stack.preview()
        planned = preview.changed()
        units = {name for name, (op, _) in planned.items() if op == "create"}
        assert {"vfio-binding", "nvidia-driver", "ct129-nvidia-userspace", "ct129-service-qwen-sglang",
                "ct129-gate-qwen-sglang"} <= units, planned
        assert {op for op, _ in planned.values()} == {"create"}
        assert entries(bed.tree) == start, "a preview changed the host"
        # The pull request workflow's own step: the same CLI, its text diff naming each unit it would create.
        workflow = run_workflow_preview(project, stack.name)
        assert workflow.returncode == 0, workflow.stdout[-3000:] + workflow.stderr[-3000:]
        assert all(f"dynamic/gpuhosts:{kind}]" in workflow.stdout
                   for kind in ("VfioBinding::vfio-binding", "DeployGate::ct129-gate-qwen-sglang")), workflow.stdout[:3000]
        assert (project.root / "preview.txt").read_text() == workflow.stdout
        assert entries(bed.tree) == start

        up = stack.up()
        created = up.changed()
        assert set(created) == set(planned) and set(created.values()) == {"create"}, created
        assert sorted(unit for unit, script in up.host_operations) == sorted(
            name for name in created if name in units_of(stack)), up.host_operations
        assert bed.problems(values) == []
        for function in RTX3090_FUNCTIONS:
            assert bed.driver(function) == "vfio-pci", function
        for address in A6000:
            assert bed.driver(address) == "nvidia", address
        converged = entries(bed.tree)
        gpus = {name: entry["outputs"] for name, entry in stack.resources().items()
                if entry["type"] == "gpuhosts:host:Gpu"}
        assert {name: o["goesTo"] for name, o in gpus.items()} == {
            "0000:01:00.0": "vfio-pci (for VMs)", "0000:21:00.0": "vfio-pci (for VMs)", "0000:41:00.0": "CT 129",
            "0000:61:00.0": "CT 129"}, gpus

        again = stack.up()
        assert again.changed() == {} and again.host_operations == [], (again.changed(), again.host_operations)
        assert entries(bed.tree) == converged
        floor = floor_noop_up(project)

        refresh = stack.refresh()
        assert refresh.changed() == {} and refresh.host_operations == []
        assert stack.preview().changed() == {}

        outputs = stack.outputs()
        gate = outputs["services"]["qwen-sglang"]
        assert gate["port"] == sglang.port and gate["lastPassedGate"]["passed"] is True, gate
        assert outputs["rebootRequired"] is True  # the vfio binding rewrote the initramfs

        state = stack.export()
        text = json.dumps(state)
        assert [key for key, value in {**SECRETS, "ssh": bed.ssh.private_key.read_text().strip()}.items()
                if value in text] == []
        resources = state["deployment"]["resources"]
        providers = [r for r in resources if r["type"].startswith("pulumi:providers:")]
        assert [p["type"] for p in providers] == ["pulumi:providers:pulumi-python"]
        pickled = {r["inputs"]["__provider"] for r in resources if "__provider" in r.get("inputs", {})}
        assert len(pickled) == 1 and len(next(iter(pickled))) < 200, "the provider is pickled by reference, once"

        gone = stack.destroy()
        assert set(gone.changed().values()) == {"delete"} and set(gone.changed()) == set(created)
        assert stack.resources().keys() <= {"pulumi:pulumi:Stack"}
        assert differences(start, entries(bed.tree)) == []
        assert (bed.tree / "var/lib/lxc/129/rootfs/srv/models/Qwen3.6-27B/config.json").is_file()
        figures.add(f"kpro5-{profile}", preview_s=preview.run.seconds, up_s=up.seconds, noop_up_s=again.seconds,
                    floor_noop_up_s=floor, refresh_s=refresh.seconds, destroy_s=gone.seconds, host_restored="yes",
                    state_kb=round(len(json.dumps(state)) / 1024))
    finally:
        bed.close()


def units_of(stack: Stack) -> set[str]:
    """The host units among a stack's resources (the dynamic ones): the others are components."""
    return {name for name, entry in stack.resources().items() if entry["type"].startswith("pulumi-python:dynamic")}
