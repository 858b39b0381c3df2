"""The kpro5 stack's changes and refusals on a simulated host reached over real SSH (tests/sshhost).

The real `__main__.py` registers the resources under the mock runtime; tests/engine drives the real host-unit
provider through Pulumi's dynamic-provider server as the engine does (refresh, parallel steps, create before
delete); the checks read the host. Up from the seed, up again and destroy are the real engine's
(tests/realengine/test_kpro5.py); drift, renames and faults are in tests/lifecycle/.
"""

from __future__ import annotations

import subprocess

import pytest

from engine import ApplyError, is_host_unit
from fakehost.tree import tree_digest
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.provider import state_signature
from gpuhosts.stacks import validate_stack
from sshhost.bed import VERSION, Bed, moved_to_vfio, names


def order_of(bed: Bed) -> list[str]:
    """The bed's units in the plan's apply order (the host's own: the bed's stack has no services)."""
    return [unit.key for unit in plan_host(validate_stack(bed.values(), set(bed.secrets()))).apply_order]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One `up` from the seed, shared: (bed, its program, start digest, digest after up, the ops of that up)."""
    bed = Bed.seed(tmp_path_factory.mktemp("lifecycle") / "template")
    start = bed.digest()
    program = bed.program()
    ops = bed.up(program=program)
    yield bed, program, start, bed.digest(), ops
    bed.close()


@pytest.fixture
def converged(template, tmp_path):
    """A private copy of the converged host and its state, with an sshd of its own."""
    bed = Bed.copy_of(template[0], tmp_path / "bed")
    yield bed
    bed.close()


def units_in(state: dict) -> dict:
    return {urn: entry for urn, entry in state.items() if is_host_unit(entry)}


def units_of(program) -> dict:
    return {r["name"]: r["inputs"] for r in program if "ensure" in r["inputs"]}


def applied(bed: Bed) -> dict:
    """The state without what a refresh rewrites (the observed facts)."""
    return {urn: (entry["id"], {k: v for k, v in entry["inputs"].items() if k != "facts"})
            for urn, entry in bed.engine.state().items()}


def test_a_gpu_moved_to_vfio_runs_only_what_must_run_and_lands(converged):
    program = converged.program()
    values = moved_to_vfio(converged.values())
    changed_program = converged.program(values)
    before, after = units_of(program), units_of(changed_program)
    must_run = [name for name in order_of(converged) if before[name] != after[name]]
    # The boot unit checks a node per container GPU, so one GPU fewer is a change of its facts.
    assert {"vfio-binding", "nvidia-uvm-at-boot", "ct129-gpu-devices"} <= set(must_run)

    preview = converged.preview(program=changed_program)
    assert sorted(preview.changed()) == sorted(must_run)
    assert all(change.operation == "update" for change in preview.changed().values())
    # The diff names what changed: the device facts of the GPU that leaves, the slot that moves to vfio-pci.
    assert 'facts["slot 0000:61:00"]' in preview.changes["vfio-binding"].diffs
    assert 'facts["device 0000:61:00.0"]' in preview.changes["ct129-gpu-devices"].diffs
    ops = converged.up(program=changed_program)
    assert names(ops, "update") == must_run
    assert {"vfio-binding", "ct129-gpu-devices"} <= {op.name for op in ops if op.changed}

    assert converged.driver("0000:61:00.0") == "vfio-pci" and converged.driver("0000:61:00.1") == "vfio-pci"
    assert converged.driver("0000:41:00.0") == "nvidia"
    assert converged.problems(values) == []
    assert converged.preview(program=changed_program).changed() == {}


def test_a_failed_command_names_the_unit_and_shows_only_the_tail_of_its_output(converged):
    converged.ssh.fail_once("update-initramfs", "update-initramfs: failed: No space left on device")
    values = moved_to_vfio(converged.values())
    with pytest.raises(ApplyError) as caught:
        converged.up(values)
    message = str(caught.value)
    assert message.startswith("vfio-binding: update: vfio-binding: ensure exited with status 1"), message
    assert "No space left on device" in message
    # The script itself never travels in an error: only the tail of what it printed.
    assert "install_file()" not in message and len(message) < 5000, len(message)


# --- bad host states: refused with a clear error, the host unchanged -------------------------------------------
def refused(bed: Bed, words: str, values=None, **options) -> ApplyError:
    before, state = bed.digest(), applied(bed)
    with pytest.raises(ApplyError) as caught:
        bed.up(values, **options)
    message = str(caught.value)
    assert "refused:" in message and words in message, message
    assert bed.digest() == before, "the host changed while refusing"
    assert applied(bed) == state, "a refused command was recorded as applied"
    return caught.value


def test_refuses_to_take_a_gpu_from_a_running_vm(template, tmp_path):
    bed = Bed.seed(tmp_path / "bed", template[0].run_file, template[0].sha256,
                   vms=((101, "win-3090", "0000:01:00", True), (103, "a6000-vm", "0000:41:00", True)))
    try:
        error = refused(bed, "VM 103 is running with 0000:41:00 passed through")
        assert [(op.name, op.outcome) for op in error.ops] == [("vfio-binding", "failed")]
    finally:
        bed.close()


def test_refuses_to_unbind_a_gpu_persistence_mode_keeps(converged):
    converged.keep_persistence_on("0000:61:00.0")
    refused(converged, "persistence mode holds GPU 0000:61:00.0", moved_to_vfio(converged.values()))


def test_refuses_a_container_user_space_that_differs_from_the_host_module(converged):
    """`pulumi up --target` of the container's user space with a version the host does not run."""
    values = converged.values()
    values["nvidia"]["version"] = "570.148.08"
    refused(converged, "would fail with 'Driver/library version mismatch'", values,
            targets=["ct129-nvidia-userspace"])
    smi = converged.smi_in_container()
    assert smi.returncode == 0 and smi.stdout.count(VERSION) == 2


def test_refuses_container_devices_without_nvidia_uvm(converged):
    unload = converged.on_host("modprobe -r nvidia_uvm")
    assert unload.returncode == 0, unload.stderr
    assert not (converged.tree / "dev/nvidia-uvm").exists()
    refused(converged, "/dev/nvidia-uvm is missing", moved_to_vfio(converged.values()),
            targets=["ct129-gpu-devices"])


# --- a host that is gone --------------------------------------------------------------------------------------
def test_an_unreachable_host_says_what_to_do(template, converged):
    after = template[3]
    program = converged.program()
    state = converged.engine.state()
    converged.ssh.stop()
    with pytest.raises(ApplyError) as caught:
        converged.preview(program=program)
    message = str(caught.value)
    assert "could not reach" in message and "connection refused" in message and "--refresh=false" in message, message
    # One dial for the whole refresh: a refusal is not dialled again, and every other unit's probe fails at once
    # with the same reason (gpuhosts/ssh.py).
    assert converged.engine.connections() == 1, converged.engine.log
    reads = [op for op in caught.value.ops if op.operation == "read"]
    assert sorted(op.name for op in reads) == sorted(order_of(converged)) and {op.outcome for op in reads} == {"failed"}
    assert len({op.error.split(": probe: ", 1)[1] for op in reads}) == 1, [op.error for op in reads]
    # Without the refresh the preview still plans from the state: nothing to do.
    assert converged.preview(program=program, refresh=False).changed() == {}

    # `pulumi destroy` refreshes first (Pulumi.yaml) and stops there, naming the way on without the host.
    with pytest.raises(ApplyError) as caught:
        converged.destroy()
    message = str(caught.value)
    assert "could not reach" in message and "pulumi destroy --refresh=false --continue-on-error" in message, message
    assert "pulumi stack rm --force" in message, message
    assert converged.engine.state() == state

    with pytest.raises(ApplyError) as caught:
        converged.destroy(refresh=False, continue_on_error=True)
    assert "pulumi stack rm --force" in str(caught.value)
    # Every unit stays in the state; the GPUs' entries, which nothing on the host backs, may go.
    assert units_in(converged.engine.state()) == units_in(state)
    converged.engine.stack_rm()
    assert converged.engine.state() == {}
    assert tree_digest(converged.tree) == after


def key_refusal(message: str, bed: Bed) -> None:
    """A changed host key is refused with the way to verify it, never with advice to destroy anything."""
    assert "presented another host key than the pinned one" in message, message
    assert f"`ssh-keyscan -t ed25519 -p {bed.ssh.port} {bed.ssh.host}`" in message, message
    assert "update gpuhosts:host.ssh.hostKey" in message, message
    assert "destroy" not in message and "stack rm" not in message, message


def test_a_host_that_shows_another_key_is_refused_before_anything_runs(converged):
    # The key the host had when the stack was converged: a real key, not the committed files' placeholder, which a
    # real address refuses at plan time (tests/test_placeholders.py).
    other = converged.root / "id_ed25519_before"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pinned = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    values = converged.values()
    values["host"]["ssh"]["hostKey"] = pinned
    # The state a converge with that pin left: since then the host shows another key (reinstalled, or someone in
    # between), so the refresh of `up` meets it first.
    state = converged.engine.state()
    for entry in state.values():
        for section in ("inputs", "outputs"):
            if isinstance(entry[section].get("host"), dict):
                entry[section]["host"]["hostKey"] = pinned
        if "signature" in entry["outputs"]:
            entry["outputs"]["signature"] = state_signature(entry["outputs"], converged.secrets()["sshPrivateKey"])
    converged.engine._save(state)
    before = converged.digest()
    with pytest.raises(ApplyError) as caught:
        converged.up(values)
    key_refusal(str(caught.value), converged)
    assert [op.operation for op in caught.value.ops if op.outcome == "ok"] == []
    assert converged.engine.connections() == 1  # refused once, then at once for every other unit
    assert converged.digest() == before and converged.engine.state() == state

    # A first `up` with that pin: its first create is refused alike.
    converged.engine.stack_rm()
    with pytest.raises(ApplyError) as caught:
        converged.up(values)
    key_refusal(str(caught.value), converged)
    assert converged.digest() == before
