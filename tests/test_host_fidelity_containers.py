"""A container's devN entries and bind mounts as pct treats them (docs/fakehost-contract.md, "Containers: devN and
mount points"): property strings with explicit keys, pending changes on a running container, every `pct set`
re-checking every devN node, and host paths compared as strings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import KPRO5_SECRETS, kpro5_values
from fakehost.util import ct_seen_devices
from fakehost.tree import seed_kpro5
from fakehost.util import configure
from gpuhosts.plans.model_download import plan_model_store
from gpuhosts.protocol import parse_result
from gpuhosts.stacks import validate_stack
from simhost import Host, refused

FIXTURES = Path(__file__).parent / "fixtures/pve"
CT = "var/lib/lxc/129/rootfs"
CONF = "etc/pve/lxc/129.conf"


def sh(host: Host, script: str, check: bool = True):
    result = host.run(f"set -e\nr=$GPUHOSTS_HOST_ROOT\n{script}")
    assert not check or result.returncode == 0, result.stdout + result.stderr
    return result


# ---- pct's own output, from the fixtures ---------------------------------------------------------------

@pytest.mark.parametrize("command, fixture", [
    ("pct config 129", "pct-pending-config.txt"),
    ("pct config 129 --current", "pct-pending-config-current.txt"),
    ("pct pending 129", "pct-pending-pending.txt"),
])
def test_pct_prints_pending_changes_as_pve_container_does(tmp_path, command, fixture):
    host = Host(seed_kpro5(tmp_path / "kpro5"), tmp_path / "unused.run", "")
    (host.tree / CONF).write_text((FIXTURES / "pct-pending-129.conf").read_text())
    assert sh(host, command).stdout == (FIXTURES / fixture).read_text()


def test_a_start_applies_pending_changes_and_refuses_two_devn_of_one_path(tmp_path):
    host = Host(seed_kpro5(tmp_path / "kpro5", ct_running=False), tmp_path / "unused.run", "")
    for node, dev in (("nvidia0", "c 195:0"), ("nvidiactl", "c 195:255")):
        (host.tree / "dev" / node).write_text(dev + "\n")
    sh(host, "pct set 129 --dev0 /dev/nvidia0 --dev1 path=/dev/nvidia0,mode=0666")
    started = sh(host, "pct start 129", check=False)
    assert started.returncode == 255
    assert "failed to mknod /var/lib/lxc/129/passthrough/dev/nvidia0: File exists" in started.stderr
    sh(host, "pct set 129 --dev1 path=/dev/nvidiactl,mode=0666 && pct start 129")
    assert [path for path, _ in ct_seen_devices(host.tree, 129)] == ["/dev/nvidia0", "/dev/nvidiactl"]


def test_every_pct_set_fails_while_a_devn_node_is_missing(tmp_path):
    """The change is written, then the regenerated lxc config stats every devN node (update_vm)."""
    host = Host(seed_kpro5(tmp_path / "kpro5", ct_running=False), tmp_path / "unused.run", "")
    (host.tree / "dev/nvidia-uvm").write_text("c 509:0\n")
    sh(host, "pct set 129 --dev0 /dev/nvidia-uvm && rm $r/dev/nvidia-uvm")
    result = sh(host, "pct set 129 --cores 4", check=False)
    assert (result.returncode, result.stderr.strip()) == (255, "Device /dev/nvidia-uvm does not exist")
    assert "cores: 4\n" in (host.tree / CONF).read_text()


@pytest.mark.parametrize("version, pending", [("5.2.2", True), ("6.0.3", True), ("6.0.4", False), ("6.0.9", False)])
def test_a_new_devn_on_a_running_container_waits_before_pve_container_6_0_4(tmp_path, version, pending):
    host = Host(seed_kpro5(tmp_path / "kpro5"), tmp_path / "unused.run", "")
    configure(host.tree, pve_container_version=version)
    (host.tree / "dev/nvidiactl").write_text("c 195:255\n")
    sh(host, "pct set 129 --dev0 /dev/nvidiactl")
    assert ("new dev0: /dev/nvidiactl" in sh(host, "pct pending 129").stdout) is pending
    assert (ct_seen_devices(host.tree, 129) == []) is pending
    sh(host, "pct reboot 129")
    assert [path for path, _ in ct_seen_devices(host.tree, 129)] == ["/dev/nvidiactl"]


# ---- the devices unit ------------------------------------------------------------------------------------

def seen(host: Host) -> list[str]:
    """The device nodes the running container has (from its start, and hot-plugged since)."""
    return [path for path, _ in ct_seen_devices(host.tree, 129)]


def spell(conf: str, spelling: str) -> str:
    """The GPU devN lines of a converged config, rewritten as a person might have written them."""
    return re.sub(r"^(dev\d+): (/dev/\S+)$", lambda m: f"{m[1]}: {spelling.format(path=m[2])}", conf, flags=re.M)


@pytest.mark.parametrize("spelling", ["path={path}", "mode=0666,path={path}", "{path},gid=44", "path={path},uid=0"])
def test_devn_entries_written_with_explicit_keys_are_recognised(converged, spelling):
    conf = converged.tree / CONF
    conf.write_text(spell(conf.read_text(), spelling))
    devices = converged.unit("ct129-gpu-devices")
    output = converged.apply(devices)
    assert not parse_result(output).changed, output
    assert converged.probe(devices) == devices.desired
    sh(converged, "pct reboot 129")
    assert sorted(seen(converged)) == sorted(
        [f"/dev/nvidia{converged.minor(a)}" for a in ("0000:41:00.0", "0000:61:00.0")]
        + ["/dev/nvidiactl", "/dev/nvidia-uvm"])


@pytest.mark.parametrize("missing, says", [
    # a node of the user's own devN: pct refuses every change until it is back or the entry goes
    ("/dev/dri/renderD128", "the host has no /dev/dri/renderD128, and pct refuses every change to the container "
                            "until it exists (its driver makes it) or the entry goes (pct set 129 --delete dev5)"),
    # a driver upgrade unloaded nvidia_uvm
    ("/dev/nvidia-uvm", "host device /dev/nvidia-uvm is missing (nvidia-modprobe -u -c=0 makes it"),
])
def test_devices_ensure_refuses_up_front_while_a_devn_node_is_missing(converged, missing, says):
    (converged.tree / "dev/dri").mkdir()
    (converged.tree / "dev/dri/renderD128").write_text("c 226:128\n")
    sh(converged, "pct set 129 --dev5 /dev/dri/renderD128,gid=104 && pct reboot 129")
    # drift that needs a `pct set`: the nvidiactl entry went
    sh(converged, r"sed -i '/^dev[0-9]*: \/dev\/nvidiactl$/d' $r/" + CONF)
    (converged.tree / missing.lstrip("/")).unlink()
    refused(converged, converged.unit("ct129-gpu-devices"), says)


@pytest.mark.parametrize("version, hotplugged", [("5.2.2", False), ("6.0.9", True)])
def test_devices_added_to_a_running_container_without_restart(converged, version, hotplugged):
    values = converged.values()
    values["containers"][0]["allowRestart"] = False
    devices = converged.unit("ct129-gpu-devices", values)
    converged.apply(devices, "teardown")
    sh(converged, "pct reboot 129")
    assert seen(converged) == []
    configure(converged.tree, pve_container_version=version)
    output = converged.apply(devices)
    assert parse_result(output).changed
    assert ("got its new devices at once (hot-plugged)" in output) is hotplugged
    assert ("gets its GPU devices only when it restarts (allowRestart is false)" in output) is not hotplugged
    # two GPUs, /dev/nvidiactl, /dev/nvidia-uvm (no profiling node: profilingDevice is false)
    assert (len(seen(converged)) == 4) is hotplugged
    assert converged.probe(devices) == devices.desired
    assert not parse_result(converged.apply(devices)).changed


def test_devices_removed_from_a_running_container_wait_for_its_restart(converged):
    values = converged.values()
    values["containers"][0]["allowRestart"] = False
    devices = converged.unit("ct129-gpu-devices", values)
    output = converged.apply(devices, "teardown")
    assert "removed dev0 (/dev/nvidia0) from container 129 at its next restart" in output
    assert len(seen(converged)) == 4
    pending = sh(converged, "pct pending 129").stdout.splitlines()
    assert sum(line.startswith("del dev") for line in pending) == 4
    sh(converged, "pct reboot 129")
    assert seen(converged) == [] and "dev0" not in (converged.tree / CONF).read_text()


# ---- the model store -------------------------------------------------------------------------------------

def store_unit(host_path: str, allow_restart: bool = True, path: str = "/srv/models"):
    values = kpro5_values()
    values.pop("services")
    values.pop("benchmarks", None)  # a benchmark compares services: none without them
    values["containers"][0].update(modelStore={"hostPath": host_path, "path": path}, allowRestart=allow_restart)
    return plan_model_store(validate_stack(values, KPRO5_SECRETS).containers[0], ())


@pytest.mark.parametrize("allow_restart", [True, False])
def test_store_teardown_on_a_running_container_says_the_mount_goes_at_the_next_restart(host, allow_restart):
    store = store_unit("/tank/models", allow_restart)
    host.apply(store)
    assert (host.tree / CT / "srv/models").is_symlink()
    output = host.apply(store, "teardown")
    assert "removed mount point mp0 (/tank/models) from container 129 at its next restart" in output
    if allow_restart:
        assert "restarted container 129 so it sees /srv/models unmounted" in output
    else:
        assert "gets /srv/models unmounted only when it restarts (allowRestart is false)" in output
        assert (host.tree / CT / "srv/models").is_symlink()
        assert "del mp0: /tank/models,mp=/srv/models" in sh(host, "pct pending 129").stdout
        sh(host, "pct reboot 129")
    assert not (host.tree / CT / "srv/models").is_symlink()
    assert "mp0" not in (host.tree / CONF).read_text()
    assert not parse_result(host.apply(store, "teardown")).changed


def test_store_ensure_takes_back_a_removal_still_pending(host):
    store = store_unit("/tank/models", allow_restart=False)
    host.apply(store)
    host.apply(store, "teardown")
    output = host.apply(store)
    assert "its pending removal is taken back" in output
    assert "[pve:pending]" not in (host.tree / CONF).read_text()
    assert host.probe(store) == store.desired
    assert not parse_result(host.apply(store)).changed


# A blank and the regex characters . * [ ] + ( in a directory name: validation lets them through.
ODD = "/tank/my models/q.*[]+("


def test_a_store_path_with_blanks_and_regex_characters_is_matched_as_a_string(host):
    store = store_unit(ODD)
    first = host.apply(store)
    assert f"mounted {ODD} at /srv/models in container 129 as mp0" in first
    assert f"mp0: {ODD},mp=/srv/models\n" in sh(host, "pct config 129").stdout
    assert not parse_result(host.apply(store)).changed
    assert host.probe(store) == store.desired
    output = host.apply(store, "teardown")
    assert f"removed mount point mp0 ({ODD}) from container 129" in output
    assert "mp0" not in (host.tree / CONF).read_text()
    assert (host.tree / ODD.lstrip("/") / ".gpuhosts-model-store").exists()


@pytest.mark.parametrize("field, value, char", [
    ("hostPath", "/tank/models,backup=0", ","),
    ("hostPath", "/tank/a=b", "="),
    ("path", "/srv/models,ro=1", ","),
])
def test_a_store_path_pct_cannot_hold_is_refused_by_name(field, value, char):
    paths = {"hostPath": "/tank/models", "path": "/srv/models", field: value}
    with pytest.raises(ValueError) as refused_path:
        store_unit(paths["hostPath"], path=paths["path"])
    assert f"modelStore.{field} {value!r} holds {char!r}, which pct's mount point entry cannot hold" in str(
        refused_path.value)

