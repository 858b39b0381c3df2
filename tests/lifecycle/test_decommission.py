"""Decommissioning kpro6 (stacks/Pulumi.kpro6.yaml) on a simulated host over SSH, as the README's runbook does it.

A bed seeded with the record's boot loader and container is brought up with the record's values, then destroyed:
the host returns to its state before gpuhosts, apart from the user data a destroy keeps (weights, checkpoints, the
container's disk). A host that no longer answers is destroyed with `--refresh=false --continue-on-error` and its
stack removed with `--force`. The migration runs kpro5 up with its gate passing before kpro6 is destroyed.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from engine import ApplyError, is_host_unit
from engine_standin import Engine as EngineStandin, start_engine
from fakehost.tree import tree_listing
from sshhost import free_port
from sshhost.bed import PROJECT, SECRETS, Bed, names, record_program

RECORD = PROJECT / "stacks" / "Pulumi.kpro6.yaml"
STACK = "kpro6"
# User data no unit declares: a fine-tuning run's checkpoint, left in the container by hand.
CHECKPOINT = "srv/checkpoints/qwen-sglang-lora/step-1200/adapter_model.safetensors"


def record() -> dict:
    config = yaml.safe_load(RECORD.read_text())["config"]
    return {key.split(":", 1)[1]: copy.deepcopy(value) for key, value in config.items()}


VMID = record()["containers"][0]["vmid"]
ROOTFS = f"var/lib/lxc/{VMID}/rootfs"
UNITS = [f"ct{VMID}-{name}" for name in ("gate-qwen-sglang", "service-qwen-sglang", "model-qwen3-6-27b",
                                         "env-qwen-sglang", "nvidia-userspace", "gpu-devices")] + [
    "nvidia-uvm-at-boot", "nvidia-driver", "vfio-binding"]


def kpro6_values(bed: Bed, port: int) -> dict:
    """The record's values aimed at the bed: its sshd and pinned key, the fake `.run`, the engine stand-in's port."""
    values = record()
    values["host"]["ssh"].update(host=bed.ssh.host, port=bed.ssh.port, user=bed.ssh.user, hostKey=bed.ssh.host_key)
    values["nvidia"].update(url=f"file://{bed.run_file}", sha256=bed.sha256)
    for service in values["services"]:
        service.update(port=port, bind="127.0.0.1")
        service["gate"].update(readyTimeoutS=30, maxTokens=64)
    return values


def kpro6_program(bed: Bed, values: dict) -> list:
    return record_program(bed.write_stack(values, f"Pulumi.{STACK}.yaml"), STACK, bed.secrets())


def seed_kpro6(root: Path, template: Bed | None = None) -> Bed:
    """A host as kpro6 stood before gpuhosts, by the record: its boot loader and its container's vmid."""
    host = record()["host"]
    if template is None:
        return Bed.seed(root, bootloader=host["bootloader"], ct_vmid=VMID)
    return Bed.seed(root, template.run_file, template.sha256, bootloader=host["bootloader"], ct_vmid=VMID)


def standin() -> EngineStandin:
    return EngineStandin(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=SECRETS["llmApiKey"])


def gate_report(bed: Bed, vmid: int) -> dict:
    """What `pulumi stack output services` shows of the gate: the gate unit's report in the state."""
    state = {entry["name"]: entry for entry in bed.engine.state().values()}
    return state[f"ct{vmid}-gate-qwen-sglang"]["outputs"]["report"]


def service_active(bed: Bed, vmid: int) -> bool:
    return bed.on_host(f"pct exec {vmid} -- systemctl is-active --quiet gpuhosts-qwen-sglang.service").returncode == 0


def user_data(bed: Bed) -> dict[str, bytes]:
    """The files a destroy must keep: the container's weights and checkpoints."""
    found = {}
    for folder in ("srv/models", "srv/checkpoints"):
        for path in sorted((bed.tree / ROOTFS / folder).rglob("*")):
            if path.is_file():
                found[str(path.relative_to(bed.tree))] = path.read_bytes()
    return found


def rootfs_line(bed: Bed) -> list[str]:
    return [line for line in bed.text(f"/etc/pve/lxc/{VMID}.conf").splitlines() if line.startswith("rootfs:")]


@pytest.fixture(scope="module")
def kpro6(tmp_path_factory):
    """kpro6 brought up from its pre-gpuhosts state, shared: (bed, values, listing before the up, its digest)."""
    port = free_port()
    server = start_engine(standin(), port)
    bed = seed_kpro6(tmp_path_factory.mktemp("kpro6") / "template")
    listing, before = tree_listing(bed.tree), bed.digest()
    values = kpro6_values(bed, port)
    created = names(bed.up(program=kpro6_program(bed, values)), "create")
    assert sorted(created) == sorted(UNITS), created
    assert gate_report(bed, VMID)["passed"], gate_report(bed, VMID)
    checkpoint = bed.tree / ROOTFS / CHECKPOINT
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      lora step 1200")
    yield bed, values, listing, before
    bed.close()
    server.shutdown()
    server.server_close()


@pytest.fixture
def converged(kpro6, tmp_path):
    bed = Bed.copy_of(kpro6[0], tmp_path / "bed")
    yield bed
    bed.close()


def test_destroy_returns_kpro6_to_before_gpuhosts_and_keeps_weights_checkpoints_and_the_disk(kpro6, converged):
    _template, _values, listing, before = kpro6
    kept, disk = user_data(converged), rootfs_line(converged)
    assert any("/srv/models/Qwen3.6-27B/" in path for path in kept) and any(CHECKPOINT in path for path in kept)
    assert service_active(converged, VMID)

    stored = converged.engine.state()
    ops = converged.destroy(refresh=True)  # `pulumi destroy -s kpro6`: Pulumi.yaml refreshes first
    # Each unit read twice: in the destroy's preview and again before its deletes (tests/engine `destroy`).
    assert sorted(op.name for op in ops if op.operation == "read") == sorted(UNITS * 2)
    gone = names(ops, "delete")
    assert sorted(gone) == sorted(UNITS) and gone[0] == f"ct{VMID}-gate-qwen-sglang", gone
    # Each unit went before what it depends on.
    position = {name: index for index, name in enumerate(gone)}
    for entry in stored.values():
        for dependency in entry["dependencies"]:
            if entry["name"] in position and stored.get(dependency, {}).get("name") in position:
                assert position[entry["name"]] < position[stored[dependency]["name"]], (entry["name"], dependency)
    assert converged.engine.state() == {}
    converged.stack_rm(STACK)

    assert user_data(converged) == kept and rootfs_line(converged) == disk
    for function in ("0000:01:00.0", "0000:01:00.1", "0000:21:00.0", "0000:41:00.0", "0000:61:00.0"):
        assert converged.driver(function) == "vfio-pci", function
    assert not (converged.tree / "sys/module/nvidia").exists()
    assert converged.container_devices(VMID) == []
    # Without the user data, the host is what it was before gpuhosts.
    for name in sorted(set(tree_listing(converged.tree)) - set(listing), reverse=True):
        if name.startswith((f"{ROOTFS}/srv/models/", f"{ROOTFS}/srv/checkpoints")):
            path = converged.tree / name
            path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    after = tree_listing(converged.tree)
    assert converged.digest() == before, {name: (listing.get(name), after.get(name))
                                          for name in sorted(set(listing) | set(after))
                                          if listing.get(name) != after.get(name)}


def test_a_failed_delete_leaves_in_the_state_only_what_was_not_deleted(converged):
    """`--continue-on-error` with one teardown failing: the rest that can go goes, the failed one is named, what it
    depends on stays; the next destroy finishes the job."""
    converged.ssh.fail_once("pct", "container 119 is locked (snapshot)",
                            when=f"exec {VMID} -- bash -c *stop and remove service qwen-sglang*")
    stored = converged.engine.state()
    with pytest.raises(ApplyError) as caught:
        converged.destroy(refresh=False, continue_on_error=True)
    message = str(caught.value)
    assert message.startswith(f"ct{VMID}-service-qwen-sglang: delete:") and "is locked" in message, message
    failed = [op.name for op in caught.value.ops if op.operation == "delete" and op.outcome == "failed"]
    assert failed == [f"ct{VMID}-service-qwen-sglang"]
    left = sorted(entry["name"] for entry in converged.engine.state().values())
    # A unit's components, up to the host's, are its parents, so they stay with it.
    kept = set(UNITS) - {f"ct{VMID}-gate-qwen-sglang"}
    parents = set()
    for entry in stored.values():
        parent = entry["parent"] if entry["name"] in kept else None
        while parent in stored:
            parents.add(stored[parent]["name"])
            parent = stored[parent]["parent"]
    assert STACK in parents and left == sorted(kept | parents), left
    with pytest.raises(ApplyError) as refused:
        converged.stack_rm(STACK)
    assert "still has resources" in str(refused.value) and "pulumi stack rm --force" in str(refused.value)

    again = names(converged.destroy(refresh=False, continue_on_error=True))
    assert sorted(again) == sorted(set(UNITS) - {f"ct{VMID}-gate-qwen-sglang"})
    assert converged.engine.state() == {}


def test_an_unreachable_kpro6_is_destroyed_from_the_state_and_its_stack_removed_by_force(converged):
    state, digest = converged.engine.state(), converged.digest()
    converged.ssh.stop()
    # `pulumi destroy` refreshes first: it stops there, and says how to go on without the host.
    with pytest.raises(ApplyError) as caught:
        converged.destroy(refresh=True)
    assert "could not reach" in str(caught.value) and "--refresh=false" in str(caught.value), str(caught.value)
    assert converged.engine.state() == state

    # `--refresh=false --continue-on-error`: every delete that can be tried is tried, and fails; nothing leaves
    # the state that was not deleted, and the run names what failed.
    with pytest.raises(ApplyError) as caught:
        converged.destroy(refresh=False, continue_on_error=True)
    message = str(caught.value)
    assert "could not reach" in message and "pulumi stack rm" in message, message
    tried = [(op.name, op.outcome) for op in caught.value.ops if op.operation == "delete"]
    assert tried == [(f"ct{VMID}-gate-qwen-sglang", "failed")], tried
    # Every unit stays in the state; the GPUs' entries, which nothing on the host backs, may go.
    assert {u: e for u, e in converged.engine.state().items() if is_host_unit(e)} == {
        u: e for u, e in state.items() if is_host_unit(e)}

    with pytest.raises(ApplyError) as refused:
        converged.stack_rm(STACK)
    assert "pulumi stack rm --force" in str(refused.value)
    converged.stack_rm(STACK, force=True)
    assert converged.engine.state() == {} and converged.digest() == digest


def test_migration_kpro5_serves_with_its_gate_passing_before_kpro6_is_destroyed(kpro6, converged, tmp_path):
    """The runbook's order: kpro5 up, its gate passed (the stack output), then kpro6 destroyed; a kpro5 whose gate
    fails leaves kpro6 serving."""
    failing_port, passing_port = free_port(), free_port()
    failing = start_engine(EngineStandin(kind="sglang", sglang_length=1.2, sglang_rate=0.8,
                                         key=SECRETS["llmApiKey"]), failing_port)
    passing = start_engine(standin(), passing_port)
    kpro5 = Bed.seed(tmp_path / "kpro5", kpro6[0].run_file, kpro6[0].sha256)
    try:
        values = kpro5.services_values(failing_port, free_port())
        with pytest.raises(ApplyError) as caught:
            kpro5.up(values)
        assert "ct129-gate-qwen-sglang" in str(caught.value), str(caught.value)
        # The gate failed: kpro6 is not destroyed, and it still serves.
        assert service_active(converged, VMID)

        values = kpro5.services_values(passing_port, free_port())
        kpro5.up(values)
        report = gate_report(kpro5, 129)
        assert report["passed"] and report["acceptance_length"] == pytest.approx(3.4), report
        assert service_active(kpro5, 129) and service_active(converged, VMID)  # both serve: no gap

        converged.destroy(refresh=True)
        assert converged.engine.state() == {}
        assert service_active(kpro5, 129) and not service_active(converged, VMID)
    finally:
        kpro5.close()
        for server in (failing, passing):
            server.shutdown()
            server.server_close()
