"""The kpro5 stack's whole lifecycle on a simulated host reached over real SSH (tests/sshhost).

The real `gpuhosts plan` writes the plan; the executor applies it as pulumi-command would (one SSH connection per
command, Pulumi's create/update/replace/delete rules, state kept between runs); the checks read the host.
Faults while applying are in tests/lifecycle/test_faults.py.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from fakehost.tree import tree_digest
from sshhost.bed import A6000, MODEL, RTX3090_FUNCTIONS, VERSION, Bed, moved_to_vfio
from sshhost.executor import CommandFailed, HostUnreachable, ApplyError

ORDER = ["kpro5-vfio-binding", "kpro5-nvidia-driver", "kpro5-nvidia-uvm-at-boot", "kpro5-ct129-gpu-devices",
         "kpro5-ct129-nvidia-userspace"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One `up` from the seed, shared: (bed, its plan, start digest, digest after up, the runs of that up)."""
    bed = Bed.seed(tmp_path_factory.mktemp("lifecycle") / "template")
    start = bed.digest()
    plan = bed.plan()
    runs = bed.up(plan=plan)
    yield bed, plan, start, bed.digest(), runs
    bed.close()


@pytest.fixture
def converged(template, tmp_path):
    """A private copy of the converged host and its state, with an sshd of its own."""
    bed = Bed.copy_of(template[0], tmp_path / "bed")
    yield bed
    bed.close()


def commands_of(plan) -> dict:
    return {r["name"]: r["inputs"] for r in json.loads((plan / "resources.json").read_text())
            if r["type"] == "command:remote:Command"}


def test_up_from_the_seed_reaches_the_kpro5_state(template):
    bed, _plan, start, after, runs = template
    assert [(r.name, r.operation) for r in runs] == [(name, "create") for name in ORDER]
    assert all(r.changed for r in runs), [r.stdout for r in runs]
    assert after != start

    for function in RTX3090_FUNCTIONS:
        assert bed.driver(function) == "vfio-pci", function
    for address in A6000:
        assert bed.driver(address) == "nvidia", address
    assert bed.text("/sys/module/nvidia/version").strip() == VERSION
    assert sorted(bed.container_devices()) == sorted(
        [f"/dev/nvidia{bed.minor(a)}" for a in A6000] + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"])
    smi = bed.smi_in_container()
    assert smi.returncode == 0, smi.stderr
    assert sorted(smi.stdout.split()) == sorted(["00000000:41:00.0,", "00000000:61:00.0,", VERSION, VERSION])
    assert bed.problems() == []

    state = bed.executor.state()
    assert sorted(s["name"] for s in state.values()) == sorted(ORDER)
    assert all(s["stdout"].rstrip().endswith("done: changed") for s in state.values())
    assert "reboot required" in next(s["stdout"] for s in state.values() if s["name"] == "kpro5-vfio-binding")


def test_up_again_runs_nothing_and_every_ensure_script_changes_nothing(template, converged):
    _bed, plan, _start, after, _runs = template
    assert converged.digest() == after
    assert converged.executor.preview(plan) == {name: "same" for name in ORDER}
    assert converged.up(plan=plan) == []
    assert not converged.executor.log_file.exists()

    # By hand, over SSH, as an operator would run them.
    for name, script in converged.ensure_scripts(plan):
        result = converged.on_host(script)
        assert result.returncode == 0, f"{name}:\n{result.stdout}{result.stderr}"
        assert result.stdout.rstrip().endswith("done: no change"), f"{name}:\n{result.stdout}"
    assert converged.digest() == after


def test_a_gpu_moved_to_vfio_runs_only_what_must_run_and_lands(template, converged):
    _bed, plan, _start, _after, _runs = template
    values = moved_to_vfio(converged.values())
    changed_plan = converged.plan(values)
    before, after = (commands_of(p) for p in (plan, changed_plan))
    must_run = [name for name in ORDER if before[name] != after[name]]
    assert "kpro5-nvidia-uvm-at-boot" not in must_run
    assert {"kpro5-vfio-binding", "kpro5-ct129-gpu-devices"} <= set(must_run)

    preview = converged.executor.preview(changed_plan)
    assert preview == {name: ("update" if name in must_run else "same") for name in ORDER}
    runs = converged.up(plan=changed_plan)
    assert [(r.name, r.operation) for r in runs] == [(name, "update") for name in must_run]
    changed = {r.name for r in runs if r.changed}
    assert {"kpro5-vfio-binding", "kpro5-ct129-gpu-devices"} <= changed

    assert converged.driver("0000:61:00.0") == "vfio-pci" and converged.driver("0000:61:00.1") == "vfio-pci"
    assert converged.driver("0000:41:00.0") == "nvidia"
    assert converged.problems(values) == []
    assert converged.up(plan=changed_plan) == []


def test_destroy_returns_to_the_start_and_keeps_the_container_disk(template, converged):
    _bed, _plan, start, _after, _runs = template
    model = converged.tree / MODEL
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_text('{"num_hidden_layers": 64}\n')
    disk_line = [line for line in converged.text("/etc/pve/lxc/129.conf").splitlines() if line.startswith("rootfs:")]
    assert disk_line

    runs = converged.destroy()
    assert [(r.name, r.operation) for r in runs] == [(name, "delete") for name in reversed(ORDER)]
    assert converged.executor.state() == {}
    assert model.read_text() == '{"num_hidden_layers": 64}\n'
    assert [line for line in converged.text("/etc/pve/lxc/129.conf").splitlines() if line.startswith("rootfs:")] == disk_line
    model.unlink()
    model.parent.rmdir()
    assert converged.digest() == start
    for function in RTX3090_FUNCTIONS + A6000:
        assert converged.driver(function) == "vfio-pci", function
    assert converged.destroy() == []  # nothing left in the state


def test_a_variable_sent_over_ssh_does_not_reach_the_host(converged):
    ssh = converged.ssh
    seen = subprocess.run(ssh.ssh_argv('echo "${GPUHOSTS_PROBE:-unset} ${LANG:-unset}"', "-o",
                                       "SetEnv=GPUHOSTS_PROBE=1 LANG=C.UTF-8"), capture_output=True, text=True)
    assert seen.stdout.split() == ["unset", "C.UTF-8"], seen.stderr


def test_a_command_with_environment_fails_as_pulumi_command_does(template, converged, tmp_path):
    _bed, plan, _start, _after, _runs = template
    resources = json.loads((plan / "resources.json").read_text())
    for r in resources:
        if r["name"] == "kpro5-nvidia-uvm-at-boot":
            r["inputs"]["environment"] = {"GPUHOSTS_MODE": "strict"}
    altered = tmp_path / "plan"
    altered.mkdir()
    (altered / "resources.json").write_text(json.dumps(resources))
    with pytest.raises(CommandFailed, match="Unable to set 'GPUHOSTS_MODE'.*AcceptEnv"):
        converged.up(plan=altered)


# --- bad host states: refused with a clear error, the host unchanged -------------------------------------------
def refused(bed: Bed, words: str, values=None, plan=None, **options) -> CommandFailed:
    before, state = bed.digest(), bed.executor.state()
    with pytest.raises(CommandFailed) as caught:
        bed.up(values, plan=plan, **options)
    message = str(caught.value)
    assert "refused:" in message and words in message, message
    assert bed.digest() == before, "the host changed while refusing"
    assert bed.executor.state() == state, "a refused command was recorded as applied"
    return caught.value


def test_refuses_to_take_a_gpu_from_a_running_vm(template, tmp_path):
    bed = Bed.seed(tmp_path / "bed", template[0].run_file, template[0].sha256,
                   vms=((101, "win-3090", "0000:01:00", True), (103, "a6000-vm", "0000:41:00", True)))
    try:
        error = refused(bed, "VM 103 is running with 0000:41:00 passed through")
        assert [r.name for r in error.runs] == ["kpro5-vfio-binding"]
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
            targets=["kpro5-ct129-nvidia-userspace"])
    smi = converged.smi_in_container()
    assert smi.returncode == 0 and smi.stdout.count(VERSION) == 2


def test_refuses_container_devices_without_nvidia_uvm(converged):
    unload = converged.on_host("modprobe -r nvidia_uvm")
    assert unload.returncode == 0, unload.stderr
    assert not (converged.tree / "dev/nvidia-uvm").exists()
    # The A6000 change re-runs the container's devices; nvidia-uvm-at-boot is unchanged and does not run.
    refused(converged, "/dev/nvidia-uvm is missing", moved_to_vfio(converged.values()),
            targets=["kpro5-ct129-gpu-devices"])


# --- a host that is gone --------------------------------------------------------------------------------------
def test_destroy_of_an_unreachable_host_says_what_to_do(template, converged):
    _bed, _plan, _start, after, _runs = template
    state = converged.executor.state()
    converged.ssh.stop()
    with pytest.raises(HostUnreachable) as caught:
        converged.destroy()
    message = str(caught.value)
    assert "could not reach" in message and "Connection refused" in message, message
    assert "pulumi destroy --continue-on-error" in message and "pulumi stack rm" in message, message
    assert converged.executor.state() == state

    with pytest.raises(ApplyError) as caught:
        converged.destroy(continue_on_error=True)
    assert "pulumi stack rm" in str(caught.value)
    assert converged.executor.state() == state
    converged.executor.stack_rm()
    assert converged.executor.state() == {}
    assert tree_digest(converged.tree) == after
