"""The kpro5 stack's whole lifecycle on a simulated host reached over real SSH (tests/sshhost).

The real `__main__.py` registers the resources under the mock runtime; tests/engine drives the real host-unit
provider through Pulumi's dynamic-provider server as the engine does (refresh, parallel steps, create before
delete); the checks read the host. Drift, renames and faults are in tests/lifecycle/.
"""

from __future__ import annotations

import base64
import pickle
import subprocess

import dill
import pytest

from engine import PROVIDER_KEY, ApplyError, is_host_unit
from fakehost.tree import tree_digest
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.protocol import parse_result
from gpuhosts.provider import state_signature
from gpuhosts.stacks import validate_stack
from sshhost.bed import A6000, MODEL, RTX3090_FUNCTIONS, VERSION, Bed, moved_to_vfio, names


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


# gpuhosts:monitoring's units beside the host's chain: the node exporter and the files wait for the vfio binding,
# the DCGM exporter for the driver.
MONITORING = ("node-exporter", "monitoring-files", "dcgm-exporter")


def test_up_from_the_seed_reaches_the_kpro5_state(template):
    bed, _program, start, after, ops = template
    order = [key for key in order_of(bed) if key not in MONITORING]
    assert order[:2] == ["vfio-binding", "nvidia-driver"] and order[-1] == "ct129-nvidia-userspace", order
    # The host's units form a chain, so their ops end in the apply order.
    assert [(op.name, op.operation) for op in ops if op.name not in MONITORING] == [(name, "create") for name in order]
    assert sorted((op.name, op.operation) for op in ops if op.name in MONITORING) == sorted(
        (name, "create") for name in MONITORING)
    assert all(op.changed for op in ops), [(op.name, op.changed) for op in ops]
    assert after != start

    for function in RTX3090_FUNCTIONS:
        assert bed.driver(function) == "vfio-pci", function
    for address in A6000:
        assert bed.driver(address) == "nvidia", address
    assert bed.text("/sys/module/nvidia/version").strip() == VERSION
    assert sorted(bed.container_devices()) == sorted(
        [f"/dev/nvidia{bed.minor(a)}" for a in A6000] + ["/dev/nvidiactl", "/dev/nvidia-uvm"])
    smi = bed.smi_in_container()
    assert smi.returncode == 0, smi.stderr
    assert sorted(smi.stdout.split()) == sorted(["00000000:41:00.0,", "00000000:61:00.0,", VERSION, VERSION])
    assert bed.problems() == []

    state = {entry["name"]: entry for entry in bed.engine.state().values() if "ensure" in entry["inputs"]}
    assert sorted(state) == sorted(order_of(bed))
    # The vfio binding rewrote the initramfs: the host needs a reboot for it, and says so as an output.
    assert state["vfio-binding"]["outputs"]["rebootRequired"] is True
    # The state holds what the provider observed after its own refresh: the desired facts.
    assert all(entry["outputs"]["facts"] == entry["inputs"]["facts"] for entry in state.values())


def test_the_exporters_run_on_loopback_and_the_packages_own_units_stay_masked(template):
    bed = template[0]
    for ours, theirs, program in (
            ("gpuhosts-node-exporter.service", "prometheus-node-exporter.service", "/usr/bin/prometheus-node-exporter"),
            ("gpuhosts-dcgm-exporter.service", "nvidia-dcgm-exporter.service", "/usr/bin/dcgm-exporter")):
        states = bed.on_host(f"systemctl is-active {ours}; systemctl is-enabled {theirs}; "
                             f"systemctl is-active {theirs}; test -x \"$GPUHOSTS_HOST_ROOT{program}\" && echo program")
        assert states.stdout.split() == ["active", "masked", "inactive", "program"], (ours, states)
    assert "--web.listen-address=127.0.0.1:9100" in bed.text("/etc/systemd/system/gpuhosts-node-exporter.service")
    rules = bed.text("/etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-kpro5.rules.yml")
    assert "GpuhostsGpuXid" in rules and "GpuhostsNodeExporterDown" in rules


def test_up_again_runs_nothing_and_every_ensure_script_changes_nothing(template, converged):
    _bed, _program, _start, after, _runs = template
    program = converged.program()
    assert converged.digest() == after
    preview = converged.preview(program=program)
    assert preview.changed() == {} and preview.refreshed == {}
    ops = converged.up(program=program)
    # Only reads: each unit's in the preview's refresh and again in the update's (tests/engine `up`).
    assert names(ops) == [] and sorted(op.name for op in ops) == sorted(order_of(converged) * 2)

    # By hand, over SSH, as an operator would run them.
    for name, script in converged.ensure_scripts(program):
        result = converged.on_host(script)
        assert result.returncode == 0, f"{name}:\n{result.stdout}{result.stderr}"
        assert parse_result(result.stdout).changed is False, f"{name}:\n{result.stdout}"
    assert converged.digest() == after


def test_the_pickled_provider_is_an_input_stable_across_program_runs_and_a_change_of_it_updates_every_unit(converged):
    """The engine diffs `__provider` like any input (tests/engine `property_diff`): two runs of today's program
    pickle the same provider, so nothing shows; a provider pickled otherwise (here another pickle protocol, as a
    Python or dill upgrade may bring) is an update of every unit, naming only that input."""
    first, second = converged.program(), converged.program()
    pickled = {r["inputs"][PROVIDER_KEY] for r in first + second if PROVIDER_KEY in r["inputs"]}
    assert len(pickled) == 1, "two runs of the program pickled the provider differently"
    assert converged.preview(program=second).changed() == {}

    provider = dill.loads(base64.b64decode(pickled.pop()))
    protocol = 5 if pickle.DEFAULT_PROTOCOL != 5 else 4
    repickled = base64.b64encode(dill.dumps(provider, protocol=protocol, recurse=True)).decode()
    changed_program = [{**r, "inputs": {**r["inputs"], PROVIDER_KEY: repickled}} if PROVIDER_KEY in r["inputs"] else r
                       for r in second]
    changes = converged.preview(program=changed_program).changed()
    assert sorted(changes) == sorted(order_of(converged)), sorted(changes)
    assert all(change.operation == "update" and change.diffs == [PROVIDER_KEY] for change in changes.values()), changes


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


def test_destroy_returns_to_the_start_and_keeps_the_container_disk(template, converged):
    _bed, _program, start, _after, _runs = template
    model = converged.tree / MODEL
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_text('{"num_hidden_layers": 64}\n')
    disk_line = [line for line in converged.text("/etc/pve/lxc/129.conf").splitlines() if line.startswith("rootfs:")]
    assert disk_line

    ops = converged.destroy()
    # the host's chain in reverse; the monitoring units, independent of it, whenever their turn comes
    assert [n for n in names(ops) if n not in MONITORING] == [
        n for n in reversed(order_of(converged)) if n not in MONITORING]
    assert sorted(n for n in names(ops) if n in MONITORING) == sorted(MONITORING)
    assert {e["name"] for e in converged.engine.state().values()} <= {"kpro5"}  # only the component may be left
    assert model.read_text() == '{"num_hidden_layers": 64}\n'
    assert [line for line in converged.text("/etc/pve/lxc/129.conf").splitlines() if line.startswith("rootfs:")] == disk_line
    model.unlink()
    model.parent.rmdir()
    assert converged.digest() == start
    for function in RTX3090_FUNCTIONS + A6000:
        assert converged.driver(function) == "vfio-pci", function
    assert names(converged.destroy()) == []  # nothing left to delete


def test_a_variable_sent_over_ssh_does_not_reach_the_host(converged):
    ssh = converged.ssh
    seen = subprocess.run(ssh.ssh_argv('echo "${GPUHOSTS_PROBE:-unset} ${LANG:-unset}"', "-o",
                                       "SetEnv=GPUHOSTS_PROBE=1 LANG=C.UTF-8"), capture_output=True, text=True)
    assert seen.stdout.split() == ["unset", "C.UTF-8"], seen.stderr


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
