"""kpro5's changes and refusals through the real Pulumi CLI, each on a copy of one converged host.

A GPU moved to vfio runs only the units whose plan changed and lands; a failed command names its unit with the
tail of its output; a host in a state the stack cannot reach from is refused before anything changes; a host
that is gone, or shows another key than the pinned one, is named with the way on. Up from the seed, up again and
destroy are tests/realengine/test_kpro5.py's.
"""

from __future__ import annotations

import subprocess

import pytest

from fakehost.tree import tree_digest
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.provider import state_signature
from gpuhosts.stacks import validate_stack
from realengine import Run, Stack
from realengine.beds import Converged
from sshhost.bed import VERSION, moved_to_vfio

pytestmark = pytest.mark.pulumi


@pytest.fixture
def converged(project, kpro5_snapshot, tmp_path):
    """A private copy of the run's converged kpro5, in a stack of its own."""
    host = Converged.restore(kpro5_snapshot, tmp_path / "bed", project)
    yield host
    host.close()


def plan_of(host: Converged, values: dict) -> dict:
    return {unit.key: unit for unit in plan_host(validate_stack(values, set(host.bed.secrets()))).apply_order}


def changed_by_scripts(run: Run) -> set[str]:
    """The units whose ensure reported that it changed the host (the provider's log)."""
    return {line.split()[1] for line in run.provider_lines
            if line.startswith("gpuhosts-unit: ") and line.endswith(" ensure changed=true")}


def applied(host: Converged) -> dict:
    """The units' state without what a refresh rewrites (the observed facts)."""
    return {name: (entry["id"], {k: v for k, v in entry["inputs"].items() if k != "facts"})
            for name, entry in host.units().items()}


def recorded(host: Converged) -> dict:
    """Each unit's id, inputs and outputs: what the state says of the host (a failed refresh still rewrites the
    engine's own bookkeeping, such as an empty `propertyDependencies`)."""
    return {name: (entry["id"], entry.get("inputs"), entry.get("outputs")) for name, entry in host.units().items()}


def test_a_gpu_moved_to_vfio_runs_only_what_must_run_and_lands(converged):
    values = moved_to_vfio(converged.values())
    before, after = plan_of(converged, converged.values()), plan_of(converged, values)
    must_run = [key for key, unit in after.items() if before[key] != unit]
    # The boot unit checks a node per container GPU, so one GPU fewer is a change of its facts.
    assert {"vfio-binding", "nvidia-uvm-at-boot", "ct129-gpu-devices"} <= set(must_run)

    preview = converged.preview(values).changed()
    assert sorted(preview) == sorted(must_run), preview
    assert {operation for operation, _ in preview.values()} == {"update"}
    # The diff names what changed: the device facts of the GPU that leaves, the slot that moves to vfio-pci.
    assert 'facts["slot 0000:61:00"]' in preview["vfio-binding"][1], preview["vfio-binding"]
    assert 'facts["device 0000:61:00.0"]' in preview["ct129-gpu-devices"][1], preview["ct129-gpu-devices"]
    up = converged.up()
    assert up.changed() == {name: "update" for name in must_run}, up.changed()
    ran = [unit for unit, _ in up.host_operations]
    assert sorted(ran) == sorted(must_run), ran
    # Each ran after the units it needs.
    assert [(unit, need) for unit in ran for need in after[unit].needs
            if need in ran and ran.index(need) > ran.index(unit)] == []
    assert {"vfio-binding", "ct129-gpu-devices"} <= changed_by_scripts(up)

    bed = converged.bed
    assert bed.driver("0000:61:00.0") == "vfio-pci" and bed.driver("0000:61:00.1") == "vfio-pci"
    assert bed.driver("0000:41:00.0") == "nvidia"
    assert bed.problems(values) == []
    assert converged.preview().changed() == {}


def test_a_failed_command_names_the_unit_and_shows_only_the_tail_of_its_output(converged):
    converged.bed.ssh.fail_once("update-initramfs", "update-initramfs: failed: No space left on device")
    run = converged.up(moved_to_vfio(converged.values()), check=False)
    assert run.returncode != 0 and set(run.errors()) == {"vfio-binding"}, run.errors()
    message = run.errors()["vfio-binding"]
    assert "vfio-binding: ensure exited with status 1" in message, message
    assert "No space left on device" in message
    # The script itself never travels in an error (the event stream carries it only as the unit's input): only the
    # tail of what it printed.
    assert "install_file()" not in run.error_text() and len(message) < 5000, len(message)


# --- bad host states: refused with a clear error, the host unchanged -------------------------------------------
def refused(host: Converged, words: str, values=None, *extra: str) -> Run:
    before, state = host.digest(), applied(host)
    run = host.up(values, *extra, check=False)
    message = run.error_text()
    assert run.returncode != 0 and "refused:" in message and words in message, message or run.stdout[-4000:]
    assert host.digest() == before, "the host changed while refusing"
    assert applied(host) == state, "a refused command was recorded as applied"
    return run


def test_refuses_to_take_a_gpu_from_a_running_vm(project, kpro5_snapshot, tmp_path):
    host = Converged.seed(project, tmp_path / "bed", run_file=kpro5_snapshot.run_file, sha256=kpro5_snapshot.sha256,
                          vms=((101, "win-3090", "0000:01:00", True), (103, "a6000-vm", "0000:41:00", True)))
    try:
        run = refused(host, "VM 103 is running with 0000:41:00 passed through")
        assert run.host_operations == [("vfio-binding", "ensure")] and set(run.errors()) == {"vfio-binding"}
    finally:
        host.close()


def test_refuses_to_unbind_a_gpu_persistence_mode_keeps(converged):
    converged.bed.keep_persistence_on("0000:61:00.0")
    refused(converged, "persistence mode holds GPU 0000:61:00.0", moved_to_vfio(converged.values()))


def test_refuses_a_container_user_space_that_differs_from_the_host_module(converged):
    """`pulumi up --target` of the container's user space with a version the host does not run."""
    values = converged.values()
    values["nvidia"]["version"] = "570.148.08"
    refused(converged, "would fail with 'Driver/library version mismatch'", values,
            converged.target("ct129-nvidia-userspace"))
    smi = converged.bed.smi_in_container()
    assert smi.returncode == 0 and smi.stdout.count(VERSION) == 2


def test_refuses_container_devices_without_nvidia_uvm(converged):
    unload = converged.bed.on_host("modprobe -r nvidia_uvm")
    assert unload.returncode == 0, unload.stderr
    assert not (converged.bed.tree / "dev/nvidia-uvm").exists()
    refused(converged, "/dev/nvidia-uvm is missing", moved_to_vfio(converged.values()),
            converged.target("ct129-gpu-devices"))


# --- a host that is gone --------------------------------------------------------------------------------------
def test_an_unreachable_host_says_what_to_do(kpro5_snapshot, converged):
    after = kpro5_snapshot.digest()
    units = recorded(converged)
    converged.bed.ssh.stop()
    preview = converged.preview(check=False)
    message = preview.error_text()
    assert preview.run.returncode != 0
    assert "could not reach" in message and "connection refused" in message and "--refresh=false" in message, message
    # One dial for the whole refresh: a refusal is not dialled again, and every other unit's probe fails at once
    # with the same reason (gpuhosts/ssh.py).
    assert preview.run.dials() == 1, preview.run.provider_lines
    reasons = {text.split(": probe: ", 1)[1].strip() for text in preview.errors().values() if ": probe: " in text}
    assert len(reasons) == 1, preview.errors()
    # Without the refresh the preview still plans from the state: nothing to do.
    assert converged.preview(None, "--refresh=false").changed() == {}

    # `pulumi destroy` refreshes first (Pulumi.yaml) and stops there, naming the way on without the host.
    destroy = converged.destroy(check=False)
    message = destroy.error_text()
    assert destroy.returncode != 0 and "could not reach" in message, message
    assert "pulumi destroy --refresh=false --continue-on-error" in message and "pulumi stack rm --force" in message
    assert recorded(converged) == units

    destroy = converged.destroy("--refresh=false", "--continue-on-error", check=False)
    assert destroy.returncode != 0 and "pulumi stack rm --force" in destroy.error_text(), destroy.error_text()
    # Every unit stays in the state: nothing on the host was undone.
    assert set(recorded(converged)) == set(units)
    converged.stack.pulumi("stack", "rm", "--force", "--yes")
    assert tree_digest(converged.bed.tree) == after


def key_refusal(message: str, host: Converged) -> None:
    """A changed host key is refused with the way to verify it, never with advice to destroy anything."""
    ssh = host.bed.ssh
    assert "presented another host key than the pinned one" in message, message
    assert f"`ssh-keyscan -t ed25519 -p {ssh.port} {ssh.host}`" in message, message
    assert "update gpuhosts:host.ssh.hostKey" in message, message
    assert "pulumi destroy" not in message and "stack rm" not in message, message


def test_a_host_that_shows_another_key_is_refused_before_anything_runs(project, converged):
    # The key the host had when the stack was converged: a real key, not the committed files' placeholder, which a
    # real address refuses at plan time (tests/test_placeholders.py).
    other = converged.bed.root / "id_ed25519_before"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pinned = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    values = converged.values()
    values["host"]["ssh"]["hostKey"] = pinned
    # The state a converge with that pin left: since then the host shows another key (reinstalled, or someone in
    # between), so the refresh of `up` meets it first.
    deployment = converged.deployment()
    for entry in deployment["deployment"]["resources"]:
        for section in ("inputs", "outputs"):
            if isinstance((entry.get(section) or {}).get("host"), dict):
                entry[section]["host"]["hostKey"] = pinned
        if "signature" in (entry.get("outputs") or {}):
            entry["outputs"]["signature"] = state_signature(entry["outputs"], converged.bed.secrets()["sshPrivateKey"])
    converged.import_state(deployment)
    state, before = recorded(converged), converged.digest()
    run = converged.up(values, check=False)
    assert run.returncode != 0
    key_refusal(run.error_text(), converged)
    assert run.host_operations == [] and run.dials() == 1  # refused once, then at once for every other unit
    assert converged.digest() == before and recorded(converged) == state

    # A first `up` with that pin: its first create is refused alike.
    converged.stack.pulumi("stack", "rm", "--force", "--yes")
    first = Stack(project, f"{converged.stack.name}-again", "kpro5", values, converged.bed.secrets())
    run = first.up(check=False)
    assert run.returncode != 0
    key_refusal(run.error_text(), converged)
    assert converged.digest() == before
