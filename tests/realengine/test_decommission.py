"""Decommissioning kpro6 (stacks/Pulumi.kpro6.yaml) through the real Pulumi CLI, as the README's runbook does it.

A simulated host seeded with the record's boot loader and container is brought up with the record's values, then
destroyed: the host returns to its state before gpuhosts, apart from the user data a destroy keeps (weights,
checkpoints, the container's disk). A teardown that fails under `--continue-on-error` leaves in the state only what
was not deleted. A host that no longer answers is destroyed with `--refresh=false --continue-on-error` and its stack
removed with `--force`. The migration runs kpro5 up with its gate passing before kpro6 is destroyed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import Counter

import pytest
import yaml

from conftest import READY_CAP_S
from engine_standin import Engine as EngineStandin, start_engine
from fakehost.tree import tree_listing
from realengine import Run, Stack, urn_name
from realengine.beds import Converged
from sshhost import free_port
from sshhost.bed import PROJECT, SECRETS, Bed

pytestmark = pytest.mark.pulumi

RECORD = PROJECT / "stacks" / "Pulumi.kpro6.yaml"
# User data no unit declares: a fine-tuning run's checkpoint, left in the container by hand.
CHECKPOINT = "srv/checkpoints/qwen-sglang-lora/step-1200/adapter_model.safetensors"


def record() -> dict:
    """The record's plain values (its secrets are set with the CLI)."""
    config = yaml.safe_load(RECORD.read_text())["config"]
    return {key.split(":", 1)[1]: copy.deepcopy(value) for key, value in config.items()
            if not (isinstance(value, dict) and set(value) == {"secure"})}


VMID = record()["containers"][0]["vmid"]
ROOTFS = f"var/lib/lxc/{VMID}/rootfs"
GATE, SERVICE = f"ct{VMID}-gate-qwen-sglang", f"ct{VMID}-service-qwen-sglang"
UNITS = [f"ct{VMID}-{name}" for name in ("gate-qwen-sglang", "service-qwen-sglang", "model-qwen3-6-27b",
                                         "env-qwen-sglang", "nvidia-userspace", "gpu-devices")] + [
    "nvidia-uvm-at-boot", "nvidia-driver", "vfio-binding"]


def kpro6_values(bed: Bed, port: int) -> dict:
    """The record's values aimed at the simulated host: its sshd and pinned key, the fake `.run`, the engine
    stand-in's port."""
    values = record()
    values["host"]["ssh"].update(host=bed.ssh.host, port=bed.ssh.port, user=bed.ssh.user, hostKey=bed.ssh.host_key)
    values["nvidia"].update(url=f"file://{bed.run_file}", sha256=bed.sha256)
    for service in values["services"]:
        service.update(port=port, bind="127.0.0.1")
        service["gate"].update(readyTimeoutS=READY_CAP_S, maxTokens=64)
    return values


def gate_output(stack: Stack) -> dict:
    """What `pulumi stack output services` shows of qwen-sglang's gate: the last report that passed."""
    services = stack.outputs().get("services") or {}
    return (services.get("qwen-sglang") or {}).get("lastPassedGate") or {}


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


def units_of(host: Converged) -> dict[str, dict]:
    """The host units in the state (the dynamic provider's resources; the others are components)."""
    return {name: entry for name, entry in host.state().items() if entry["type"].startswith("pulumi-python:dynamic")}


def operator_destroy(host: Converged) -> tuple[Run, list[dict]]:
    """`pulumi destroy --yes` as an operator types it: a preview, then the destroy, each refreshing first
    (Pulumi.yaml's `options.refresh: always`). With `--json` the CLI prints the preview's document, then the
    destroy's event stream: the run holds the events, beside the preview's steps."""
    run = host.stack.pulumi("destroy", "--yes", "--json")
    document, _, events = run.stdout.partition('\n{"sequence":')
    return dataclasses.replace(run, stdout='{"sequence":' + events), json.loads(document)["steps"]


def probes(run: Run) -> Counter:
    """How often each unit was read on the host in the run (the provider's log)."""
    return Counter(line.split()[1] for line in run.provider_lines
                   if line.startswith("gpuhosts-unit: ") and " probe status=" in line)


def recorded(host: Converged) -> dict[str, tuple]:
    """What the state holds of each unit: its id, inputs and outputs (the engine's own bookkeeping beside them, such
    as an empty `propertyDependencies`, may be written anew by any run)."""
    return {name: (entry["id"], entry.get("inputs"), entry.get("outputs")) for name, entry in units_of(host).items()}


def teardowns(run: Run) -> list[str]:
    return [unit for unit, script in run.host_operations if script == "teardown"]


def stack_names(host: Converged) -> set[str]:
    listed = host.stack.pulumi("stack", "ls", "--json", stacked=False).stdout
    return {entry["name"] for entry in json.loads(listed)}


@pytest.fixture(scope="module")
def kpro6(project, sglang, tmp_path_factory):
    """kpro6 brought up by the CLI from its pre-gpuhosts state, shared: (the host and its stack, the tree's listing
    before the up, its digest)."""
    host = record()["host"]
    bed = Bed.seed(tmp_path_factory.mktemp("kpro6") / "template", bootloader=host["bootloader"], ct_vmid=VMID)
    listing, before = tree_listing(bed.tree), bed.digest()
    template = Converged(bed, Stack(project, "kpro6", "kpro6", kpro6_values(bed, sglang.port), bed.secrets()))
    try:
        up = template.stack.up()
        created = {name for name, op in up.changed().items() if op == "create" and name in units_of(template)}
        assert sorted(created) == sorted(UNITS), sorted(up.changed())
        assert sorted(unit for unit, _ in up.host_operations) == sorted(UNITS), up.host_operations
        assert gate_output(template.stack).get("passed"), template.stack.outputs()["services"]
        checkpoint = bed.tree / ROOTFS / CHECKPOINT
        checkpoint.parent.mkdir(parents=True)
        checkpoint.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      lora step 1200")
        yield template, listing, before
    finally:
        template.close()


@pytest.fixture
def converged(kpro6, tmp_path):
    host = Converged.copy_of(kpro6[0], tmp_path / "bed")
    yield host
    host.close()


def test_destroy_returns_kpro6_to_before_gpuhosts_and_keeps_weights_checkpoints_and_the_disk(kpro6, converged):
    _template, listing, before = kpro6
    bed = converged.bed
    kept, disk = user_data(bed), rootfs_line(bed)
    assert any("/srv/models/Qwen3.6-27B/" in path for path in kept) and any(CHECKPOINT in path for path in kept)
    assert service_active(bed, VMID)

    stored = converged.state()
    run, planned = operator_destroy(converged)
    # The preview and the destroy each refresh: every unit read twice, once by each provider process.
    assert probes(run) == Counter({unit: 2 for unit in UNITS}), probes(run)
    assert run.dials() == 2, [line for line in run.provider_lines if "dial" in line]
    deleted = run.changed()
    assert set(deleted.values()) == {"delete"} and set(deleted) == set(stored) | {f"gpuhosts-{converged.stack.name}"}
    assert {urn_name(step["urn"]) for step in planned if step["op"] == "delete"} == set(deleted)
    gone = teardowns(run)
    assert sorted(gone) == sorted(UNITS) and gone[0] == GATE, gone
    # Each unit went before what it depends on.
    position = {name: index for index, name in enumerate(gone)}
    assert [(name, urn_name(dependency)) for name, entry in stored.items() if name in position
            for dependency in entry.get("dependencies", [])
            if urn_name(dependency) in position and position[name] > position[urn_name(dependency)]] == []
    assert converged.state() == {}
    converged.stack.pulumi("stack", "rm", "--yes")
    assert converged.stack.name not in stack_names(converged)

    assert user_data(bed) == kept and rootfs_line(bed) == disk
    for function in ("0000:01:00.0", "0000:01:00.1", "0000:21:00.0", "0000:41:00.0", "0000:61:00.0"):
        assert bed.driver(function) == "vfio-pci", function
    assert not (bed.tree / "sys/module/nvidia").exists()
    assert bed.container_devices(VMID) == []
    # Without the user data, the host is what it was before gpuhosts.
    for name in sorted(set(tree_listing(bed.tree)) - set(listing), reverse=True):
        if name.startswith((f"{ROOTFS}/srv/models/", f"{ROOTFS}/srv/checkpoints")):
            path = bed.tree / name
            path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    after = tree_listing(bed.tree)
    assert bed.digest() == before, {name: (listing.get(name), after.get(name))
                                    for name in sorted(set(listing) | set(after))
                                    if listing.get(name) != after.get(name)}


def test_a_failed_delete_leaves_in_the_state_only_what_was_not_deleted(converged):
    """`--continue-on-error` with one teardown failing: the rest that can go goes, the failed one is named, what it
    depends on stays; the next destroy finishes the job."""
    converged.bed.ssh.fail_once("pct", f"container {VMID} is locked (snapshot)",
                                when=f"exec {VMID} -- bash -c *stop and remove service qwen-sglang*")
    stored = converged.state()
    run = converged.destroy("--refresh=false", "--continue-on-error", check=False)
    assert run.returncode != 0
    assert set(run.errors()) == {SERVICE}, run.errors()
    message = run.errors()[SERVICE]
    assert message.startswith(f"{SERVICE}: teardown exited with status") and "is locked" in message, message
    assert teardowns(run) == [GATE, SERVICE], run.host_operations
    assert {name: op for name, op in run.changed().items() if name in UNITS} == {GATE: "delete", SERVICE: "failed"}
    # A unit's components, up to the host's, are its parents, so they stay with it.
    kept = set(UNITS) - {GATE}
    parents = set()
    for name in kept:
        parent = stored[name].get("parent")
        while parent and urn_name(parent) in stored:
            parents.add(urn_name(parent))
            parent = stored[urn_name(parent)].get("parent")
    left = set(converged.state())
    assert record()["host"]["name"] in parents and left == kept | parents, sorted(left)

    refused = converged.stack.pulumi("stack", "rm", "--yes", check=False)
    words = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "still has resources" in words and "pulumi stack rm --force" in words, words

    again = converged.destroy("--refresh=false", "--continue-on-error")
    assert sorted(teardowns(again)) == sorted(kept), again.host_operations
    assert converged.state() == {}


def test_an_unreachable_kpro6_is_destroyed_from_the_state_and_its_stack_removed_by_force(converged):
    units, digest = recorded(converged), converged.digest()
    converged.bed.ssh.stop()
    # `pulumi destroy` refreshes first: it stops there, and says how to go on without the host.
    destroy = converged.destroy(check=False)
    message = destroy.error_text()
    assert destroy.returncode != 0 and "could not reach" in message and "--refresh=false" in message, message
    assert destroy.host_operations == [] and recorded(converged) == units

    # `--refresh=false --continue-on-error`: every delete that can be tried is tried, and fails; nothing leaves
    # the state that was not deleted, and the run names what failed.
    destroy = converged.destroy("--refresh=false", "--continue-on-error", check=False)
    message = destroy.error_text()
    assert destroy.returncode != 0 and "could not reach" in message and "pulumi stack rm" in message, message
    assert set(destroy.errors()) == {GATE}, destroy.errors()
    assert {name: op for name, op in destroy.changed().items() if name in units} == {GATE: "failed"}
    # Every unit stays in the state; the GPUs' entries, which nothing on the host backs, may go.
    assert recorded(converged) == units

    refused = converged.stack.pulumi("stack", "rm", "--yes", check=False)
    words = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "pulumi stack rm --force" in words, words
    converged.stack.pulumi("stack", "rm", "--force", "--yes")
    assert converged.stack.name not in stack_names(converged) and converged.digest() == digest


class FailingGateEngine:
    """An SGLang stand-in whose drafts are accepted too rarely for the deploy gate (1.2 tokens a step, under
    the record's 2.0)."""

    def __init__(self):
        self.port = free_port()
        self.server = start_engine(EngineStandin(kind="sglang", sglang_length=1.2, sglang_rate=0.8,
                                                 key=SECRETS["llmApiKey"]), self.port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_migration_kpro5_serves_with_its_gate_passing_before_kpro6_is_destroyed(project, sglang, kpro6, converged,
                                                                              tmp_path):
    """The runbook's order: kpro5 up, its gate passed (the stack output), then kpro6 destroyed; a kpro5 whose gate
    fails leaves kpro6 serving."""
    failing = FailingGateEngine()
    seeded = kpro6[0].bed
    kpro5 = Bed.seed(tmp_path / "kpro5", seeded.run_file, seeded.sha256)
    try:
        stack = Stack(project, "kpro5-migration", "kpro5", kpro5.services_values(failing.port, free_port()),
                      kpro5.secrets())
        up = stack.up(check=False)
        assert up.returncode != 0 and "ct129-gate-qwen-sglang" in up.errors(), up.errors()
        assert not gate_output(stack).get("passed")
        # The gate failed: kpro6 is not destroyed, and it still serves.
        assert service_active(converged.bed, VMID)

        stack.set_values(kpro5.services_values(sglang.port, free_port()))
        stack.up()
        report = gate_output(stack)
        assert report.get("passed") and report["acceptance_length"] == pytest.approx(3.4), report
        assert service_active(kpro5, 129) and service_active(converged.bed, VMID)  # both serve: no gap

        converged.destroy()
        assert converged.state() == {}
        assert service_active(kpro5, 129) and not service_active(converged.bed, VMID)
    finally:
        kpro5.close()
        failing.close()
