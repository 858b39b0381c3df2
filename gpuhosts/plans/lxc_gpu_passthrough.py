"""LxcGpuPassthrough: `devN` entries for a container's GPUs (minors resolved on the host), nvidiactl and nvidia-uvm."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from gpuhosts.config import ContainerConfig, StackConfig
from gpuhosts.facts import Fact, desired, file_fact, observation, render_probe, systemd_unit_facts
from gpuhosts.hostside import lxc_gpu_passthrough as decisions
from gpuhosts.render import HostFile, render
from gpuhosts.units import Unit

# The boot unit makes every NVIDIA node a container needs; its file keeps the name hosts already have enabled.
UVM_UNIT = "gpuhosts-nvidia-uvm.service"
UVM_AT_BOOT = "nvidia-uvm-at-boot"
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# The devices' decisions run on the host as this file's own text (gpuhosts/hostside/lxc_gpu_passthrough.py).
DECIDER = Path(decisions.__file__).read_text()
# What every container with a GPU needs; the profiling node only where the stack asks for it (profilingDevice).
PROFILING_NODE = "/dev/nvidia-uvm-tools"


def container_nodes(container: ContainerConfig) -> tuple[str, ...]:
    return tuple(node for node in CONTROL_NODES if node != PROFILING_NODE or container.profiling_device)


def devices_key(vmid: int) -> str:
    return f"ct{vmid}-gpu-devices"


def plan_uvm_at_boot(config: StackConfig, needs: tuple[str, ...]) -> Unit:
    """The boot unit that makes every NVIDIA device node a container is given, before the guests start: nothing
    else creates them at boot (no udev rule, the module makes none). Its key keeps its first name."""
    unit_file = HostFile(f"/etc/systemd/system/{UVM_UNIT}", render("lxc_gpu_passthrough/nvidia-uvm.service.j2"))
    gpus = sorted({gpu.address for container in config.containers for gpu in config.container_gpus(container.vmid)})
    values = dict(unit=UVM_AT_BOOT, uvm_unit=unit_file, uvm_unit_name=UVM_UNIT, container_gpus=gpus)
    node = "[ -e \"$root{node}\" ] && echo present || echo missing"
    facts = [file_fact(unit_file), *systemd_unit_facts(unit_file),
             *(Fact(f"node {path}", node.format(node=path), "present") for path in CONTROL_NODES),
             *(Fact(f"node of GPU {address}", f"gpu_node {shlex.quote(address)}", "present") for address in gpus)]
    return Unit(
        key=UVM_AT_BOOT,
        # The host's boot-time device nodes, a kind of their own beside a container's passthrough; a stack
        # converged when both were LxcGpuPassthrough keeps the resource.
        kind="NvidiaDeviceNodes",
        formerly=(("LxcGpuPassthrough", None),),
        ensure=render("lxc_gpu_passthrough/uvm-ensure.sh.j2", **values),
        teardown=render("lxc_gpu_passthrough/uvm-teardown.sh.j2", **values),
        probe=render_probe(UVM_AT_BOOT, facts, prelude=render("lxc_gpu_passthrough/nodes-probe-helpers.sh.j2")),
        desired=desired(facts),
        needs=needs,
        files=(unit_file,),
        undoes=f"{UVM_UNIT} disabled and removed: /dev/nvidia-uvm and the GPU nodes are no longer made at boot",
    )


def plan_container_devices(config: StackConfig, container: ContainerConfig, needs: tuple[str, ...]) -> Unit:
    unit = devices_key(container.vmid)
    values = dict(
        unit=unit,
        vmid=container.vmid,
        hostname=container.hostname,
        allow_restart=container.allow_restart,
        gpus=[gpu.address for gpu in config.container_gpus(container.vmid)],
        nodes=list(container_nodes(container)),
        unwanted=[] if container.profiling_device else [PROFILING_NODE],
        privileged=container.privileged,
    )
    values.update(decider=DECIDER.rstrip("\n"), plan_json=json.dumps(
        {key: values[key] for key in ("vmid", "hostname", "privileged", "gpus", "nodes", "unwanted")}, sort_keys=True))
    # The GPU's node is named by its minor, which only the host's driver knows; the fact names the GPU.
    facts = [Fact(f"device {gpu.address}", f"container_device_of_gpu {gpu.address}", "passed")
             for gpu in config.container_gpus(container.vmid)]
    facts += [Fact(f"device {node}", f"container_device {node}", "passed") for node in container_nodes(container)]
    # privileged or not, as the container's config says (pct config's `unprivileged`, 0 when absent)
    facts.append(Fact("privileged", "container_privileged", "yes, declared" if container.privileged else "no"))
    if not container.profiling_device:
        # passed by hand (or by a release before it was asked for): seen, and the ensure takes it back if it is ours
        facts.append(Fact(f"device {PROFILING_NODE}", f"container_device {PROFILING_NODE}", "absent"))
    # Another guest on one of them is drift the ensure refuses: the value names the guest.
    facts += [Fact(f"other guests on {gpu.address}", f"gpu_guests {gpu.address}", "none")
              for gpu in config.container_gpus(container.vmid)]
    # What the host's driver decided, for the record: the GPUs' minors and the dynamic majors.
    facts += [observation(f"minor of {gpu.address}", f"gpu_minor {gpu.address}")
              for gpu in config.container_gpus(container.vmid)]
    facts += [observation(f"major of {name}", f"char_major {name}") for name in ("nvidia-uvm", "nvidia-caps")]
    prelude = render("lxc_gpu_passthrough/probe-helpers.sh.j2", **values)
    return Unit(
        key=unit,
        kind="LxcGpuPassthrough",
        ensure=render("lxc_gpu_passthrough/devices-ensure.sh.j2", **values),
        teardown=render("lxc_gpu_passthrough/devices-teardown.sh.j2", **values),
        probe=render_probe(unit, facts, prelude=prelude),
        desired=desired(facts),
        needs=needs,
        undoes=(f"devN entries naming the nodes gpuhosts gives removed from CT {container.vmid} "
                f"({container.hostname}): GPUs "
                f"{', '.join(gpu.address for gpu in config.container_gpus(container.vmid))}, "
                f"{', '.join(container_nodes(container))}; the container loses them at its next restart"),
        restarts=container.vmid,
        restart_allowed=container.allow_restart,
    )
