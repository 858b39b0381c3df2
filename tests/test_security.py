"""Each finding of the security review, the attack reproduced first, then refused (docs/operations.md, "What gpuhosts
trusts").

The scripts run with the simulated host's root folder (GPUHOSTS_HOST_ROOT) as the test's own user, as root runs
them on a host: what a user other than root may plant, the test plants.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fakehost import host_env
from gpuhosts.check import HubError, hub_listing
from gpuhosts.config import ConfigError
from gpuhosts.facts import keyed_digest, keyed_observed
from gpuhosts.plans.training_node import training_envs
from gpuhosts.protocol import Result, parse_result, skipped
from gpuhosts import provider as provider_module
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.provider import (PROBE_TIMEOUT_S, SIGNATURE, TRUST_VARIABLE, HostUnitProvider, UnitFailed,
                               operation_timeout_s, redacted, signature_problem, state_signature, unit_inputs)
from gpuhosts.units import KIND_LIMITS_S, UNIT_KINDS
from gpuhosts.render import render
from gpuhosts_monitor.app import MonitorConfig, create_app
from gpuhosts.ssh import DEAD_PEER_S, dead_peer_detection
from gpuhosts.stacks import require_locks, validate_stack, validate_trainer_stack
from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values


def run(tree: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=host_env(tree), capture_output=True, text=True, timeout=60)


def locked(tree: Path, name: str = "apt") -> subprocess.CompletedProcess:
    return run(tree, render("common/lib.sh.j2", unit="locker") + f'with_lock {name} echo "held {name}"\n')


# --- a lock path another user steers ------------------------------------------------------------------------------

def test_the_lock_folder_is_root_only(tmp_path):
    done = locked(tmp_path)
    assert done.returncode == 0 and "held apt" in done.stdout, done.stderr
    folder = tmp_path / "run/gpuhosts-locks"
    assert oct(folder.stat().st_mode & 0o777) == "0o700" and not folder.is_symlink()
    # the former world-writable place is not used at all
    assert not (tmp_path / "run/lock").exists()


def test_a_link_planted_for_the_lock_folder_is_refused_and_not_followed(tmp_path):
    victim = tmp_path / "etc/shadow"
    victim.parent.mkdir(parents=True)
    victim.write_text("root:x:secret\n")
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run/gpuhosts-locks").symlink_to(elsewhere)
    (elsewhere / "apt.lock").symlink_to(victim)
    done = locked(tmp_path)
    assert done.returncode == 1 and "is a symbolic link" in done.stderr, done.stderr
    assert victim.read_text() == "root:x:secret\n"


def test_a_lock_folder_others_may_enter_is_refused(tmp_path):
    folder = tmp_path / "run/gpuhosts-locks"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o777)
    done = locked(tmp_path)
    assert done.returncode == 1 and "is not a 0700 folder" in done.stderr and "remove it" in done.stderr, done.stderr


def test_a_lock_held_for_ever_fails_the_unit_instead_of_hanging(tmp_path):
    script = render("common/lib.sh.j2", unit="locker").replace("flock -w 1800", "flock -w 1")
    assert locked(tmp_path).returncode == 0
    holder = subprocess.Popen(["flock", str(tmp_path / "run/gpuhosts-locks/apt.lock"), "sleep", "30"])
    try:
        done = run(tmp_path, script + "with_lock apt echo never\n")
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1 and "was held by another gpuhosts operation" in done.stderr, done.stderr
    assert "never" not in done.stdout


# --- an engine beyond loopback without a key ----------------------------------------------------------------------

@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "10.20.0.129"])
def test_a_service_beyond_loopback_needs_an_api_key(bind):
    values = kpro5_values()
    service = values["services"][0]
    service.update(bind=bind)
    service.pop("apiKeySecret", None)
    with pytest.raises(ConfigError) as caught:
        validate_stack(values, KPRO5_SECRETS)
    assert "apiKeySecret: is required" in str(caught.value) and "bind 127.0.0.1" in str(caught.value)


def test_a_service_on_loopback_needs_no_key():
    values = kpro5_values()
    service = values["services"][0]
    service.update(bind="127.0.0.1")
    service.pop("apiKeySecret", None)
    validate_stack(values, KPRO5_SECRETS)


# --- a host key of a kind no host has -----------------------------------------------------------------------------

SK_KEY = ("sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29tAAAAIE0fNpDOuRdkF3qWPFhGdQlmvkW0jJx"
          "8YyVwQ1gYBh5hAAAABHNzaDo=")


@pytest.mark.parametrize("key, words", [
    # before: accepted by the stack's pattern, then the SSH library raised inside the provider
    (SK_KEY, "security-key (FIDO) type"),
    # a type pasted beside another type's data
    ("ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAICsXHjlWhs3f2mkHV9MvWFYYsUeqST3abeFnm/3cM+DA", "not an OpenSSH public key"),
    ("ssh-ed25519 not-base64!", "not an OpenSSH public key"),
])
def test_a_host_key_of_a_kind_no_host_has_is_refused_at_plan_time(key, words):
    values = kpro5_values()
    values["host"]["ssh"]["hostKey"] = key
    with pytest.raises(ConfigError) as caught:
        validate_stack(values, KPRO5_SECRETS)
    assert "gpuhosts:host.ssh.hostKey" in str(caught.value) and words in str(caught.value)


# --- a live secret's digest in the state ---------------------------------------------------------------------------

def test_a_key_file_holding_another_key_says_only_that_it_differs():
    """Before, the refreshed fact carried the keyed digest of the host's live key, readable in the state, where a
    guess could be tested offline (the key is the unit's key, which the state names)."""
    unit, live = "ct129-service-qwen-sglang", "sk-someone-elses-key"
    observed = f"keyed sha256:{keyed_digest(unit, f'GPUHOSTS_API_KEY={live}' + chr(10))} mode:600 (gpuhosts:llmApiKey as GPUHOSTS_API_KEY)"
    stored, note = keyed_observed(unit, observed, lambda name: "the-configured-key")
    assert stored == "not gpuhosts:llmApiKey (another value), mode:600" and note is None
    assert keyed_digest(unit, f"GPUHOSTS_API_KEY={live}\n") not in stored


# --- the Hub token sent where a response points ---------------------------------------------------------------------

class _Page:
    def __init__(self, body: list, link: str = ""):
        self.body, self.headers = json.dumps(body).encode(), {"Link": link}

    def __enter__(self):
        return io.BytesIO(self.body)

    def __exit__(self, *exc):
        return False


def test_the_hub_token_goes_only_to_the_hub_the_stack_names():
    sent: list[tuple[str, str | None]] = []

    def opener(request, timeout):
        sent.append((request.full_url, request.headers.get("Authorization")))
        page = _Page([{"type": "file", "path": "config.json"}], '<https://collector.example/steal?page=2>; rel="next"')
        stream = page.__enter__()
        stream.headers = page.headers
        return contextlib.nullcontext(stream)

    with pytest.raises(HubError, match="not followed"):
        hub_listing("https://huggingface.co", "z-lab/Qwen3.6-27B-DFlash", "main", token="hf_secret", opener=opener)
    assert [url for url, _auth in sent] == [
        "https://huggingface.co/api/models/z-lab/Qwen3.6-27B-DFlash/tree/main?recursive=true&expand=false"]


# --- the monitor opened by another name ---------------------------------------------------------------------------

@pytest.mark.parametrize("host, status", [
    ("127.0.0.1:8686", 200), ("localhost:8686", 200), ("[::1]:8686", 200),
    # a page of evil.example whose name now resolves to 127.0.0.1, or an SSH tunnel's local name
    ("evil.example:8686", 421), ("attacker.example", 421),
])
def test_the_monitor_without_a_token_answers_only_to_its_own_names(tmp_path, host, status):
    log = tmp_path / "train.log"
    log.write_text("")
    app = create_app(MonitorConfig(log=log, checkpoints=tmp_path, server_url="http://127.0.0.1:9", cache_s=0,
                                   nvidia_smi="/bin/false"))
    response = app.test_client().get("/api/status", headers={"Host": host})
    assert response.status_code == status, response.get_data(as_text=True)


def test_a_name_the_operator_allows_is_answered(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    app = create_app(MonitorConfig(log=log, checkpoints=tmp_path, server_url="http://127.0.0.1:9", cache_s=0,
                                   nvidia_smi="/bin/false", allowed_hosts=("trainer.lab",)))
    assert app.test_client().get("/healthz", headers={"Host": "trainer.lab:8686"}).status_code == 200


# --- deleteOnDestroy on a folder gpuhosts did not make ---------------------------------------------------------------

def deleted(tree: Path, directory: str, marker: str) -> subprocess.CompletedProcess:
    return run(tree, render("common/lib.sh.j2", unit="model") + f'delete_ours {directory} {marker} deleteOnDestroy\n')


def test_delete_on_destroy_removes_a_folder_its_download_made(tmp_path):
    weights = tmp_path / "srv/models/Qwen3.6-27B"
    weights.mkdir(parents=True)
    (weights / ".gpuhosts-download").write_text("Qwen/Qwen3.6-27B@abc\n")
    done = deleted(tmp_path, "/srv/models/Qwen3.6-27B", ".gpuhosts-download")
    assert done.returncode == 0 and not weights.exists()


def test_delete_on_destroy_keeps_a_folder_gpuhosts_did_not_make(tmp_path):
    """The attack first: a model's localDir of /home/alice (a path the stack's checks allow) with deleteOnDestroy
    removed the user's home on destroy."""
    home = tmp_path / "home/alice"
    home.mkdir(parents=True)
    (home / "thesis.tex").write_text("years of work\n")
    done = deleted(tmp_path, "/home/alice", ".gpuhosts-download")
    assert done.returncode == 0 and "keeping /home/alice: it holds no .gpuhosts-download" in done.stdout
    assert (home / "thesis.tex").read_text() == "years of work\n"


def test_delete_on_destroy_does_not_follow_a_link(tmp_path):
    elsewhere = tmp_path / "tank/other"
    elsewhere.mkdir(parents=True)
    (elsewhere / ".gpuhosts-download").write_text("x\n")
    (tmp_path / "srv/models").mkdir(parents=True)
    (tmp_path / "srv/models/Qwen3.6-27B").symlink_to(elsewhere)
    done = deleted(tmp_path, "/srv/models/Qwen3.6-27B", ".gpuhosts-download")
    assert done.returncode == 0 and "is a symbolic link" in done.stdout
    assert (elsewhere / ".gpuhosts-download").exists() and (tmp_path / "srv/models/Qwen3.6-27B").is_symlink()


# --- uv fetched by name alone -----------------------------------------------------------------------------------------

UV_FILE = Path(__file__).resolve().parent.parent / "gpuhosts/uv-requirements.txt"


def test_uv_is_pinned_by_the_sha256_of_every_wheel_of_its_release():
    text = UV_FILE.read_text()
    hashes = re.findall(r"--hash=sha256:([0-9a-f]+)", text)
    assert re.search(r"^uv==\d+\.\d+\.\d+ \\$", text, re.M) and len(hashes) >= 10
    assert all(len(h) == 64 for h in hashes)
    # the wheel this machine's pip downloads for Linux x86_64 (PyPI's simple index, uv 0.13.9)
    assert "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19" in hashes


@pytest.mark.parametrize("stack", ["kpro5", "trainer"])
def test_every_uv_a_host_installs_is_checked_against_those_hashes(stack, tmp_path):
    """Before, `pip install uv==0.13.9` took whatever file the index served under that name."""
    subprocess.run([sys.executable, "-m", "gpuhosts.cli", "plan", stack, "--out", str(tmp_path)], check=True,
                   capture_output=True, cwd=UV_FILE.parent.parent)
    scripts = [p.read_text() for p in tmp_path.glob("hosts/*/commands/*/ensure.sh")]
    installing = [s for s in scripts if "ensure_uv()" in s]
    assert installing
    for script in installing:
        assert "pip install --quiet --require-hashes --only-binary :all: -r" in script
        assert not re.search(r"pip install [^\n]*uv==", script)


def test_make_installs_uv_from_the_same_file_with_hash_checking():
    makefile = (UV_FILE.parent.parent / "Makefile").read_text()
    recipe = makefile.split("$(UV): gpuhosts/uv-requirements.txt\n", 1)[1].split("\n\n", 1)[0]
    assert "--require-hashes" in recipe and "-r gpuhosts/uv-requirements.txt" in recipe and "uv==" not in recipe


# --- code run as root fetched by a movable tag ---------------------------------------------------------------------

def trainer_plan_error(change) -> str:
    values = trainer_values()
    change(values["training"]["speculators"])
    with pytest.raises(ConfigError) as caught:
        require_locks(validate_trainer_stack(values, TRAINER_SECRETS))
    return str(caught.value)


def test_speculators_scripts_are_checked_out_by_the_commit_their_release_tag_names():
    stack = validate_trainer_stack(trainer_values(), TRAINER_SECRETS)
    assert training_envs(stack.training).speculators.checkout_ref == "1c2895f3b6c7b649c271ced55418e67e3ddae255"


@pytest.mark.parametrize("change, field, words", [
    (lambda s: s.update(repository="https://git.example/speculators"), "training.speculators.scriptsCommit",
     "is required with repository https://git.example/speculators"),
    (lambda s: s.update(scriptsCommit="v0.7.0"), "training.speculators.scriptsCommit", "is not a full commit"),
    # Before, a build from git took any ref: a tag or a pull request's head moves under the lock and the checkout.
    (lambda s: s.update(gitRef="refs/tags/v0.7.0"), "training.speculators.gitRef", "is not a full commit"),
    (lambda s: s.update(gitRef="refs/pull/975/head"), "training.speculators.gitRef", "list the PR in includesPrs"),
])
def test_scripts_no_commit_pins_are_refused_at_plan_time(change, field, words):
    message = trainer_plan_error(change)
    assert f"gpuhosts:{field}" in message and words in message


# --- no bound on time ----------------------------------------------------------------------------------------------

def test_a_hung_operation_is_ended_on_the_host_and_says_so(tmp_path):
    """Before, a step that never returned (a `curl` to a silent server, a `flock` on a lock kept for ever) held the
    unit, the provider and `pulumi up` with it for good."""
    script = tmp_path / "unit.sh"
    script.write_text("echo started; sleep 60; echo never\n")
    command = render("common/run.sh.j2", path=str(script), unit="ct129-model-qwen3-6-27b", operation="ensure",
                     owner="", timeout_s=1, probe_plan="")
    done = subprocess.run(["bash", "-c", command], env=host_env(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 124 and "started" in done.stdout and "never" not in done.stdout
    assert "ct129-model-qwen3-6-27b ensure ran past 1 s and was ended" in done.stderr


def limits_of(kind: str, timeouts: dict | None = None) -> dict:
    """A unit's limits as the engine hands its inputs back (numbers as floats)."""
    values = kpro5_values()
    values["host"]["ssh"]["operationTimeouts"] = timeouts or {}
    stack = validate_stack(values, KPRO5_SECRETS)
    unit = next(u for u in plan_host(stack).apply_order if u.kind == kind)
    inputs = unit_inputs(unit, {}, None, stack.host.ssh.operation_timeouts)
    return json.loads(json.dumps({key: float(value) for key, value in inputs["limits"].items()}))


@pytest.mark.parametrize("kind, timeouts, environ, expected", [
    ("NodeExporter", None, {}, {"probe": 600, "ensure": 1800, "teardown": 1800}),
    ("ModelDownload", None, {}, {"probe": 600, "ensure": 43200, "teardown": 1800}),
    ("NvidiaDriver", None, {}, {"probe": 600, "ensure": 7200, "teardown": 3600}),
    ("ModelDownload", {"ModelDownload": {"ensure": 86400, "probe": 1200}}, {},
     {"probe": 1200, "ensure": 86400, "teardown": 1800}),
    # for one run, on a link slower than the stack says: every ensure and teardown, never a probe
    ("NodeExporter", None, {"GPUHOSTS_OPERATION_TIMEOUT_S": "43200"}, {"probe": 600, "ensure": 43200,
                                                                       "teardown": 43200}),
    ("NodeExporter", None, {"GPUHOSTS_OPERATION_TIMEOUT_S": "soon"}, {"probe": 600, "ensure": 1800, "teardown": 1800}),
], ids=["default", "a download", "the driver", "the stack's own", "raised for one run", "not a number"])
def test_every_operation_has_a_limit_per_unit_kind_the_operator_may_change(kind, timeouts, environ, expected):
    props = {"limits": limits_of(kind, timeouts)}
    assert {op: operation_timeout_s(op, props, environ) for op in expected} == expected


def test_a_state_without_limits_gets_the_defaults():
    assert [operation_timeout_s(op, {}, {}) for op in ("probe", "ensure", "teardown")] == [PROBE_TIMEOUT_S, 1800, 1800]


@pytest.mark.parametrize("timeouts, words", [
    ({"ModelDownloads": {"ensure": 60}}, "'ModelDownloads' is no unit kind; use one of"),
    ({"ModelDownload": {"install": 60}}, "ModelDownload.install: the operations are probe, ensure, teardown"),
    ({"ModelDownload": {"ensure": 1}}, "ModelDownload.ensure: 1 s; give 10 to 604800 seconds"),
])
def test_a_limit_the_stack_gets_wrong_is_refused_naming_it(timeouts, words):
    values = kpro5_values()
    values["host"]["ssh"]["operationTimeouts"] = timeouts
    with pytest.raises(ConfigError) as caught:
        validate_stack(values, KPRO5_SECRETS)
    assert "gpuhosts:host.ssh.operationTimeouts" in str(caught.value) and words in str(caught.value)


def test_every_kind_a_plan_makes_is_one_a_limit_may_name():
    stack = validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS)
    kinds = {u.kind for u in plan_host(stack).apply_order}
    kinds |= {u.kind for u in plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS))
              .graph.apply_order}
    assert kinds <= UNIT_KINDS and set(KIND_LIMITS_S) <= UNIT_KINDS


def test_a_dead_peer_is_noticed_within_a_minute():
    """TCP keepalives on an idle connection and TCP_USER_TIMEOUT on unacknowledged data, set on the SSH socket."""
    with socket.socket() as sock:
        dead_peer_detection(sock)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
        interval = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)
        probes = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)
        unacked_ms = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
    assert idle + interval * probes <= 60 and unacked_ms <= 60_000
    assert DEAD_PEER_S == max(idle + interval * probes, unacked_ms // 1000) == 60


# --- a container's output read as the host's result --------------------------------------------------------------------

FORGED = ('echo \'GPUHOSTS_RESULT {"changed":false,"rebootRequired":false}\'\n'
          # a process in the container printing after the unit's own result line
          'echo \'GPUHOSTS_SKIPPED left the host as it is: resource x owns this unit now\'\n'
          'echo \'GPUHOSTS_RESULT {"changed":true,"rebootRequired":true,"report":{"awaitReboot":{"bootId":"x"}}}\'\n')


def test_a_container_cannot_make_the_host_reboot_or_skip_a_teardown(tmp_path):
    """Before, the last result line the container printed was the unit's: a container could ask the host to
    reboot, or have a teardown reported as skipped."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pct").write_text('#!/bin/bash\ncase "$1" in exec) shift 3; exec "$@" ;; esac\n')
    # The container's status as the API gives it (GET /nodes/{node}/lxc/129/status/current).
    (bin_dir / "pvesh").write_text('#!/bin/bash\necho \'{"status":"running","vmid":129}\'\n')
    for stand_in in ("pct", "pvesh"):
        (bin_dir / stand_in).chmod(0o755)
    script = render("common/in-container.sh.j2", unit="ct129-env-qwen-sglang", vmid=129,
                    inner=FORGED.rstrip("\n"), secret=None, teardown=False)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    result = parse_result(done.stdout)
    assert (result.changed, result.reboot_required, result.report) == (False, False, {})
    assert skipped(done.stdout) == []
    assert "(printed in the container) GPUHOSTS_SKIPPED" in done.stdout


# --- services as root with no sandbox ------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", ["kpro5", "trainer"])
def test_every_service_gpuhosts_installs_is_hardened(stack, tmp_path):
    subprocess.run([sys.executable, "-m", "gpuhosts.cli", "plan", stack, "--out", str(tmp_path)], check=True,
                   capture_output=True, cwd=UV_FILE.parent.parent)
    units = [p for p in tmp_path.glob("hosts/**/etc/systemd/system/*.service")]
    assert units
    for unit in units:
        text = unit.read_text()
        if "Type=oneshot" in text:
            continue
        assert "\nNoNewPrivileges=yes\n" in text, unit
    monitor = [u for u in units if u.name == "gpuhosts-training-monitor.service"]
    for unit in monitor:
        # it answers HTTP: the most exposed, the most closed
        assert {"ProtectSystem=strict", "ProtectHome=read-only", "PrivateTmp=yes"} <= set(unit.read_text().split("\n"))


# --- a teardown that takes an administrator's packages with it -------------------------------------------------------

def removing(tree: Path, depends: str = "") -> subprocess.CompletedProcess:
    state = tree / "var/lib/fakehost"
    state.mkdir(parents=True, exist_ok=True)
    (state / "dpkg-installed").write_text("dkms\nproxmox-headers-6.8.12-4-pve\nzfs-dkms-extra\n")
    if depends:
        (state / "dpkg-depends").write_text(depends)
    script = render("common/lib.sh.j2", unit="nvidia-driver") + \
        "remove_packages remove dkms proxmox-headers-6.8.12-4-pve\nfinish\n"
    return subprocess.run(["bash", "-c", script], env=host_env(tree), capture_output=True, text=True, timeout=60)


def installed(tree: Path) -> list[str]:
    return (tree / "var/lib/fakehost/dpkg-installed").read_text().split()


def test_packages_gpuhosts_installed_go_when_nothing_else_needs_them(tmp_path):
    done = removing(tmp_path)
    assert done.returncode == 0, done.stderr
    assert installed(tmp_path) == ["zfs-dkms-extra"] and skipped(done.stdout) == []


def test_packages_another_package_needs_are_kept_and_destroy_says_why(tmp_path):
    """The attack first: `apt-get remove -y dkms` also removes what an administrator installed since that needs
    dkms; apt's simulation shows it, and the teardown keeps them all."""
    done = removing(tmp_path, "zfs-dkms-extra: dkms\n")
    assert done.returncode == 0, done.stderr
    assert installed(tmp_path) == ["dkms", "proxmox-headers-6.8.12-4-pve", "zfs-dkms-extra"]
    (why,) = skipped(done.stdout)
    assert "would also remove zfs-dkms-extra" in why and "kept the packages dkms proxmox-headers-6.8.12-4-pve" in why


# --- redaction by a secret's name ------------------------------------------------------------------------------------

def test_a_failure_message_hides_every_secret_by_its_value():
    """Before, only config names with key/token/secret/password in them were redacted: a secret stack key named
    `gpuhosts:gatewayCredential` (any name apiKeySecret may give) was printed in the error, and so in the log."""
    config = {"gpuhosts:gatewayCredential": "sk-live-0123456789abcdef",
              "gpuhosts:sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
                                        "-----END OPENSSH PRIVATE KEY-----\n"}
    text = ("curl: (22) 401 for Bearer sk-live-0123456789abcdef\n"
            "key line b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ echoed\n")
    shown = redacted(text, config)
    assert "sk-live" not in shown and "b3BlbnNzaC1rZXktdjE" not in shown and shown.count("[secret]") == 2


# --- scripts read back from the state ----------------------------------------------------------------------------

STACK_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nstack-key-body-for-the-mac\n-----END OPENSSH PRIVATE KEY-----\n"
PLANTED = 'touch /tmp/planted\n'


def applied_unit() -> dict:
    """A unit's outputs as the provider's create left them in the state."""
    props = {"host": {"address": "10.0.0.5", "port": 22.0, "user": "root", "hostKey": "ssh-ed25519 AAAAC3Nz"},
             "unit": "vfio-binding", "ensure": "echo ensure\n", "teardown": "echo teardown\n",
             "probe": "echo probe\n", "facts": {"driver": "vfio-pci"}, "secret": None}
    return HostUnitProvider._outputs(props, Result(changed=True))


def edited(change) -> dict:
    props = applied_unit()
    change(props)
    return props


class RecordingProvider(HostUnitProvider):
    """The provider with its host replaced by a record of what would have run there."""

    def __init__(self):
        self.ran: list[str] = []

    def observe(self, props):
        self.ran.append(props["probe"])
        return dict(props["facts"])

    def _apply(self, resource_id, props, operation):
        self.ran.append(props[operation])
        return Result(changed=True)


@pytest.fixture
def stack_key(monkeypatch):
    monkeypatch.setattr(provider_module, "_CONFIG", {"gpuhosts:sshPrivateKey": STACK_KEY})
    monkeypatch.delenv(TRUST_VARIABLE, raising=False)


@pytest.mark.parametrize("change, words", [
    (lambda p: p.update(probe=PLANTED + p["probe"]), "do not match their signature"),
    (lambda p: p["host"].update(address="10.0.0.6"), "do not match their signature"),
    (lambda p: p.update(unit="driver"), "do not match their signature"),
    (lambda p: p.pop(SIGNATURE), "holds no signature"),
    (lambda p: p.update(probe=PLANTED, signature=state_signature({**p, "probe": PLANTED}, "another key")),
     "do not match their signature"),
], ids=["probe", "host", "unit", "unsigned", "another key"])
def test_a_probe_edited_in_the_state_does_not_run(stack_key, change, words):
    provider = RecordingProvider()
    result = provider.read("id", edited(change))
    assert provider.ran == []
    (fact,) = result.inputs["facts"].values()
    assert fact.startswith("not read: ") and words in fact and "`pulumi up` runs its ensure" in fact, fact


def test_a_teardown_edited_in_the_state_does_not_run(stack_key):
    provider = RecordingProvider()
    with pytest.raises(UnitFailed) as refused:
        provider.delete("id", edited(lambda p: p.update(teardown=PLANTED)))
    assert provider.ran == []
    assert "teardown: nothing ran" in str(refused.value) and f"{TRUST_VARIABLE}=1" in str(refused.value)


def test_the_state_the_provider_signed_runs_and_stays_signed(stack_key):
    provider = RecordingProvider()
    props = applied_unit()
    # the engine hands numbers back as floats and keeps what the outputs held
    result = provider.read("id", json.loads(json.dumps(props)))
    assert provider.ran == ["echo probe\n"] and result.outs[SIGNATURE] == props[SIGNATURE]
    provider.delete("id", result.outs)
    assert provider.ran[-1] == "echo teardown\n"
    assert STACK_KEY.strip() not in json.dumps(result.outs)


def test_an_operator_may_vouch_for_a_state_once_and_it_is_signed(stack_key, monkeypatch):
    monkeypatch.setenv(TRUST_VARIABLE, "1")
    provider = RecordingProvider()
    result = provider.read("id", edited(lambda p: p.pop(SIGNATURE)))
    assert provider.ran == ["echo probe\n"]
    monkeypatch.delenv(TRUST_VARIABLE)
    assert signature_problem(result.outs, STACK_KEY) is None
