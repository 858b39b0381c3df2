"""The simulated systemctl as systemd 252 is: masks, drop-ins and `show` (docs/fakehost-contract.md, "systemd").

`show` is checked line for line against what systemd 252 printed for the same units after the same steps
(tests/fixtures/systemd/show/, captured by its capture.sh); mask and unmask against systemctl(1) and
src/shared/install.c, with systemd 252's messages as captured there."""

from __future__ import annotations

import subprocess

import pytest

from conftest import FIXTURES
from fakehost import host_env
from fakehost.tree import seed_kpro5

SHOW = FIXTURES / "systemd" / "show"
PROPERTIES = "ExecStart,Environment,User,UnitFileState,ActiveState,DropInPaths"
SGLANG = "gpuhosts-qwen-sglang.service"
SERVE = "gpuhosts-serve.service"
UNITS = "$GPUHOSTS_HOST_ROOT/etc/systemd/system"


def sh(tree, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=host_env(tree), capture_output=True, text=True, timeout=60)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "host"
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in (SHOW / "units").iterdir():
        (root / "etc/systemd/system" / unit.name).write_text(unit.read_text())
    # gpuhosts-serve's program, so that the simulated start finds it (a server that is not a stand-in is only
    # marked active)
    program = root / "usr/local/bin/serve"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return root


def dropin(unit: str, name: str, text: str) -> str:
    """What `systemctl edit` leaves: a file in the unit's drop-in directory (systemd.unit(5), "drop-in")."""
    return f"mkdir -p {UNITS}/{unit}.d && printf '{text}' >{UNITS}/{unit}.d/{name}"


# (capture, steps on the simulated host, the unit shown) — the steps capture.sh took on systemd itself.
CAPTURES = [
    *[(name, "true", f"gpuhosts-{name}.service") for name in
      ("qwen-sglang", "qwen-vllm-dflash", "nvidia-persistenced", "nvidia-uvm", "hidden-state-server",
       "dflash-training", "training-monitor", "quoting", "serve")],
    ("qwen-sglang-enabled", f"systemctl enable {SGLANG}", SGLANG),
    ("qwen-sglang-dropin-execstart", f"systemctl enable {SGLANG} && " + dropin(
        SGLANG, "override.conf", "[Service]\\nExecStart=\\nExecStart=/opt/gpuhosts/qwen-sglang/venv/bin/python "
        "/usr/local/lib/gpuhosts/sglang-serve.py --model-path /srv/models/other --port 30001\\n"), SGLANG),
    ("qwen-sglang-dropin-environment", f"systemctl enable {SGLANG} && " + dropin(
        SGLANG, "override.conf", "[Service]\\nEnvironment=SGLANG_DEBUG=1\\n"), SGLANG),
    ("qwen-sglang-two-dropins", f"systemctl enable {SGLANG} && "
     + dropin(SGLANG, "override.conf", "[Service]\\nEnvironment=SGLANG_DEBUG=1\\n") + " && "
     + dropin(SGLANG, "10-user.conf", "[Service]\\nUser=nobody\\n"), SGLANG),
    ("qwen-sglang-masked", f"rm {UNITS}/{SGLANG} && systemctl mask {SGLANG}", SGLANG),
    ("nvidia-persistenced-dropin", dropin("gpuhosts-nvidia-persistenced.service", "override.conf",
                                          "[Service]\\nExecStart=\\nExecStart=/usr/bin/nvidia-persistenced "
                                          "--no-persistence-mode\\n"), "gpuhosts-nvidia-persistenced.service"),
    ("training-monitor-masked", f"systemctl enable gpuhosts-training-monitor.service && "
     f"rm {UNITS}/gpuhosts-training-monitor.service && systemctl mask gpuhosts-training-monitor.service",
     "gpuhosts-training-monitor.service"),
    ("not-found", "true", "gpuhosts-absent.service"),
]


@pytest.mark.parametrize("capture, steps, unit", CAPTURES, ids=[c[0] for c in CAPTURES])
def test_show_prints_what_systemd_prints(tree, capture, steps, unit):
    """systemctl(1) show -p: each asked property, empty ones too, in systemd's order; ExecStart one line per command
    as `{ path=… ; argv[]=… ; … }` (org.freedesktop.systemd1(5) ExecStart), Environment quoted as a shell would
    need, DropInPaths in the order of the drop-ins' names."""
    assert sh(tree, steps).returncode == 0
    shown = sh(tree, f"systemctl show -p {PROPERTIES} {unit}")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (SHOW / f"{capture}.txt").read_text()


def test_show_value_and_the_order_of_every_property(tree):
    """--value prints the values alone, an empty line for an empty one; the properties come in systemd's order,
    whatever the order asked (tests/fixtures/systemd/show/order.txt)."""
    value = sh(tree, f"systemctl show --value -p {PROPERTIES} gpuhosts-nvidia-uvm.service").stdout
    assert value == (SHOW / "nvidia-uvm-value.txt").read_text()
    order = [line.split("=", 1)[0] for line in (SHOW / "order.txt").read_text().splitlines()]
    shown = sh(tree, "systemctl show -p " + ",".join(reversed(order)) + " gpuhosts-failing.service").stdout
    assert [line.split("=", 1)[0] for line in shown.splitlines()] == order


# (steps, exit status of the last command, what it prints on stdout, what its stderr holds, checks after it)
MASKING = [
    pytest.param(f"systemctl mask {SGLANG}", 1, "",
                 f"Failed to mask unit: File /etc/systemd/system/{SGLANG} already exists.", f"[ -f {UNITS}/{SGLANG} ]",
                 id="a unit file in the config directory cannot be masked"),
    pytest.param(f"rm {UNITS}/{SGLANG} && systemctl mask {SGLANG}", 0, "",
                 f"Created symlink /etc/systemd/system/{SGLANG} \u2192 /dev/null.",
                 f'[ "$(readlink {UNITS}/{SGLANG})" = /dev/null ]', id="mask links the name to /dev/null"),
    pytest.param(f"rm {UNITS}/{SGLANG} && systemctl mask {SGLANG} 2>/dev/null && systemctl mask {SGLANG}", 0, "", "",
                 "true", id="masking a masked unit does nothing"),
    pytest.param(f"rm {UNITS}/{SGLANG} && systemctl mask -q {SGLANG} && systemctl is-enabled {SGLANG}", 1, "masked\n",
                 "", "true", id="is-enabled says masked and exits non-zero"),
    pytest.param(f"systemctl mask --runtime {SGLANG} 2>/dev/null && systemctl is-enabled {SGLANG}", 1, "disabled\n",
                 "", f'[ "$(readlink "$GPUHOSTS_HOST_ROOT/run/systemd/system/{SGLANG}")" = /dev/null ]',
                 id="a runtime mask loses to the unit file in /etc"),
    pytest.param(f"systemctl mask --runtime -q gpuhosts-absent.service && systemctl is-enabled gpuhosts-absent.service",
                 1, "masked-runtime\n", "", "true", id="a runtime mask of a unit with no file"),
    pytest.param(f"rm {UNITS}/{SGLANG} && systemctl mask -q {SGLANG} && systemctl start {SGLANG}", 1, "",
                 f"Failed to start {SGLANG}: Unit {SGLANG} is masked.", "true", id="a masked unit does not start"),
    pytest.param(f"systemctl start {SERVE} && rm {UNITS}/{SERVE} && systemctl mask -q {SERVE} && "
                 f"systemctl restart {SERVE}", 1, "", f"Failed to restart {SERVE}: Unit {SERVE} is masked.",
                 f'[ "$(systemctl is-active {SERVE})" = active ]', id="restart is refused before the stop"),
    pytest.param(f"systemctl start {SERVE} && rm {UNITS}/{SERVE} && systemctl mask -q {SERVE}", 0, "", "",
                 f'[ "$(systemctl is-active {SERVE})" = active ]', id="mask alone leaves it running"),
    pytest.param(f"systemctl start {SERVE} && rm {UNITS}/{SERVE} && systemctl mask -q --now {SERVE}", 0, "", "",
                 f'[ "$(systemctl is-active {SERVE})" = inactive ]', id="mask --now stops it"),
    pytest.param(f"rm {UNITS}/{SGLANG} && systemctl mask -q {SGLANG} && systemctl enable {SGLANG}", 1, "",
                 f"Failed to enable unit: Unit file /etc/systemd/system/{SGLANG} is masked.", "true",
                 id="a masked unit cannot be enabled"),
    pytest.param(f"systemctl enable -q {SGLANG} && rm {UNITS}/{SGLANG} && systemctl mask -q {SGLANG} && "
                 f"systemctl disable {SGLANG}", 0, "", f"Unit /etc/systemd/system/{SGLANG} is masked, ignoring.",
                 f"[ -L {UNITS}/multi-user.target.wants/{SGLANG} ]", id="disable leaves a masked unit's links"),
    pytest.param(f"systemctl enable -q {SGLANG} && rm {UNITS}/{SGLANG} && systemctl mask -q {SGLANG} && "
                 f"systemctl unmask {SGLANG}", 0, "",
                 f'Removed "/etc/systemd/system/{SGLANG}".\n'
                 f'Removed "/etc/systemd/system/multi-user.target.wants/{SGLANG}".',
                 f"[ ! -e {UNITS}/{SGLANG} ] && [ ! -e {UNITS}/multi-user.target.wants ]",
                 id="unmask removes the mask and the links that pointed at it"),
    pytest.param(f"systemctl unmask {SGLANG}", 0, "", "", f"[ -f {UNITS}/{SGLANG} ]",
                 id="unmask leaves a unit file that is no mask"),
    pytest.param("systemctl unmask gpuhosts-absent.service", 0, "",
                 "Unit gpuhosts-absent.service does not exist, proceeding anyway.", "true",
                 id="unmask of a unit that does not exist"),
    pytest.param(f": >{UNITS}/gpuhosts-empty.service && systemctl is-enabled gpuhosts-empty.service", 1, "masked\n",
                 "", "true", id="an empty unit file is a mask"),
]


@pytest.mark.parametrize("steps, rc, stdout, stderr, after", MASKING)
def test_mask_and_unmask(tree, steps, rc, stdout, stderr, after):
    """systemctl(1) mask, unmask and is-enabled; src/shared/install.c `create_symlink` (a file in the way is
    EEXIST), `unit_file_unmask` (only a mask is removed, with the symlinks to it); systemd.unit(5): an empty file or a
    symlink to /dev/null is a mask, and the config directory in /etc comes before /run in the search path."""
    done = sh(tree, steps)
    assert (done.returncode, done.stdout) == (rc, stdout), done.stderr
    assert stderr in done.stderr
    assert sh(tree, after).returncode == 0, after


def test_a_masked_unit_does_not_start_at_boot(tmp_path):
    """systemd.unit(5): a masked unit "cannot be activated", its .wants/ link notwithstanding."""
    host = seed_kpro5(tmp_path / "kpro5")
    (host / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    (host / "usr/local/bin/serve").write_text("#!/bin/sh\n")
    (host / "usr/local/bin/serve").chmod(0o755)
    (host / "etc/systemd/system" / SERVE).write_text((SHOW / "units" / SERVE).read_text())
    steps = f"systemctl enable -q --now {SERVE} && rm {UNITS}/{SERVE} && systemctl mask -q {SERVE} && systemctl reboot"
    assert sh(host, steps).returncode == 0
    assert sh(host, f"systemctl is-active {SERVE}").stdout == "inactive\n"
    assert (host / "etc/systemd/system/multi-user.target.wants" / SERVE).is_symlink()


def test_drop_ins_merge_after_the_unit_file_in_the_order_of_their_names(tree):
    """systemd.unit(5) "drop-in": `.conf` files only, in lexical order after the unit file; one of the same name in
    /etc hides the one in /run; an empty ExecStart= clears the commands before it (systemd.service(5) ExecStart=)."""
    steps = " && ".join([
        dropin(SGLANG, "20-b.conf", "[Service]\\nExecStart=\\nExecStart=/bin/b\\n"),
        dropin(SGLANG, "10-a.conf", "[Service]\\nExecStart=/bin/a\\n"),
        dropin(SGLANG, "30-c.conf.disabled", "[Service]\\nExecStart=/bin/ignored\\n"),
        f"mkdir -p $GPUHOSTS_HOST_ROOT/run/systemd/system/{SGLANG}.d",
        f"printf '[Service]\\nUser=nobody\\n' >$GPUHOSTS_HOST_ROOT/run/systemd/system/{SGLANG}.d/10-a.conf",
        f"printf '[Service]\\nUser=daemon\\n' >$GPUHOSTS_HOST_ROOT/run/systemd/system/{SGLANG}.d/40-d.conf",
    ])
    assert sh(tree, steps).returncode == 0
    shown = sh(tree, f"systemctl show -p ExecStart,User,DropInPaths {SGLANG}").stdout.splitlines()
    assert shown == [
        "ExecStart={ path=/bin/b ; argv[]=/bin/b ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; "
        "code=(null) ; status=0/0 }",
        "User=daemon",
        f"DropInPaths=/etc/systemd/system/{SGLANG}.d/10-a.conf /etc/systemd/system/{SGLANG}.d/20-b.conf "
        f"/run/systemd/system/{SGLANG}.d/40-d.conf"]
