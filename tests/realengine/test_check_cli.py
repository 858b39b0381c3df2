"""`gpuhosts check STACK`: the units' probes on a live host over real SSH, without Pulumi.

The host is the simulated kpro5 behind a real OpenSSH server (tests/sshhost/bed.py), converged once by `pulumi up`
of the real CLI and restored by copy for each drift; `gpuhosts check` then runs as its own process against the bed's stack file (host key
pinned in it), with the bed's client key in a file. Drift is made by hand with the cases of
tests/realengine/drifts.py; the scheduled-check units are taken from docs/operations.md and given to systemd's verifier.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhosts.check import (
    DRIFTED,
    EXIT_DRIFT,
    EXIT_INVALID,
    EXIT_ERROR,
    EXIT_IN_SYNC,
    FAILED,
    IN_SYNC,
    KEY_FILE_VARIABLE,
    NOT_DECLARED,
    UNREACHABLE,
    FieldDrift,
    HubError,
    UnitCheck,
    compare,
    exit_code,
    hub_listing,
    load,
)
from gpuhosts.cli import main
from gpuhosts.provider import NOT_REPORTED
from realengine.drifts import DRIFTS
from realengine.beds import Converged
from sshhost import free_port
from sshhost.bed import PROJECT, Bed

pytestmark = pytest.mark.pulumi

ANALYZE = shutil.which("systemd-analyze")
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
ARROW = " → "
SECURE = {"secure": "v1:AAABAGxvY2tlZC1ieS10aGUtY2xpLW5vdC1oZXJlCg=="}


# --- pure: the comparison and the exit code ---------------------------------------------------------------------------
@pytest.mark.parametrize("desired, observed, drift, observations", [
    ({"a": "1"}, {"a": "1"}, [], {}),
    ({"a": "1"}, {"a": "2"}, [FieldDrift("a", "2", "1")], {}),
    ({"a": "1"}, {}, [FieldDrift("a", NOT_REPORTED, "1")], {}),
    ({"a": "1"}, {"a": "1", "b": "x"}, [FieldDrift("b", "x", NOT_DECLARED)], {}),
    ({"a": "1"}, {"a": "1", "observed: minor": "3"}, [], {"minor": "3"}),
    ({"a": "1", "b": "2"}, {"b": "9", "a": "0", "observed: major": "509"},
     [FieldDrift("a", "0", "1"), FieldDrift("b", "9", "2")], {"major": "509"}),
], ids=["equal", "changed", "not reported", "undeclared fact", "observation only", "plan order"])
def test_compare_is_the_refresh_against_the_declared_facts(desired, observed, drift, observations):
    assert compare(desired, observed) == (drift, observations)


@pytest.mark.parametrize("statuses, code", [
    ([IN_SYNC, IN_SYNC], EXIT_IN_SYNC),
    ([IN_SYNC, DRIFTED], EXIT_DRIFT),
    ([DRIFTED, UNREACHABLE], EXIT_ERROR),
    ([IN_SYNC, FAILED], EXIT_ERROR),
    ([], EXIT_IN_SYNC),
])
def test_exit_code(statuses, code):
    assert exit_code([UnitCheck(f"u{i}", "K", s) for i, s in enumerate(statuses)]) == code


# --- live: the simulated host over SSH ---------------------------------------------------------------------------------
class Page(io.BytesIO):
    def __init__(self, entries, link=""):
        super().__init__(json.dumps(entries).encode())
        self.headers = {"Link": link} if link else {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_hubs_listing_is_read_page_after_page_with_the_token_when_one_is_set():
    asked = []

    def opener(request, timeout):
        asked.append((request.full_url, request.headers.get("Authorization")))
        if len(asked) == 1:
            return Page([{"type": "file", "path": "a"}], '<https://hub.example/api/models/o/r/tree/main?cursor=2>; '
                                                         'rel="next"')
        return Page([{"type": "file", "path": "b"}])

    entries = hub_listing("https://hub.example/", "o/r", "refs/pr/1", "hf_x", opener=opener)
    assert [e["path"] for e in entries] == ["a", "b"]
    # The revision is quoted whole into the path, as huggingface_hub's list_repo_tree quotes it.
    assert asked == [("https://hub.example/api/models/o/r/tree/refs%2Fpr%2F1?recursive=true&expand=false",
                      "Bearer hf_x"),
                     ("https://hub.example/api/models/o/r/tree/main?cursor=2", "Bearer hf_x")]


def test_a_repository_the_hub_does_not_have_is_named_with_its_answer(tmp_path):
    from fakehost.hub import HubApi
    from fakehost.tree import seed_kpro5
    api = HubApi(seed_kpro5(tmp_path / "kpro5"))
    try:
        with pytest.raises(HubError, match=r"the Hub's listing of nobody/nothing@main answered 404 \(RepoNotFound\)"):
            hub_listing(api.endpoint, "nobody/nothing", "main")
        assert [e["path"] for e in hub_listing(api.endpoint, "Qwen/Qwen3.6-27B", "main")][:2] == \
            ["config.json", "model-00001-of-00003.safetensors"]
    finally:
        api.close()


@pytest.fixture(scope="module")
def converged(project, kpro5_snapshot, tmp_path_factory):
    host = Converged.restore(kpro5_snapshot, tmp_path_factory.mktemp("check") / "template", project)
    yield host
    host.close()


@pytest.fixture(scope="module")
def template(converged) -> Bed:
    return converged.bed


def stack_file(bed: Bed, **ssh) -> Path:
    """The bed's stack as a person keeps it: the SSH key only as a `secure:` value the CLI alone decrypts."""
    values = bed.values()
    values["host"]["ssh"].update(ssh)
    values["sshPrivateKey"] = SECURE
    return bed.write_stack(values)


def key_lines(key: Path) -> list[str]:
    return [line for line in key.read_text().splitlines() if line and not line.startswith("-----")]


def run_check(stack: Path, key: Path | None, *args: str, env: dict[str, str] | None = None,
              secret: Path | None = None) -> subprocess.CompletedProcess:
    """`gpuhosts check kpro5` as its own process; no line of the key file ever shows in what it prints."""
    environment = {k: v for k, v in os.environ.items() if k != KEY_FILE_VARIABLE}
    argv = [sys.executable, "-m", "gpuhosts.cli", "check", "kpro5", "--stack-file", str(stack), *args]
    if key is not None:
        argv += ["--ssh-key", str(key)]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=PROJECT, env={**environment, **(env or {})},
                            timeout=300)
    for line in key_lines(secret or key or Path(env[KEY_FILE_VARIABLE])):
        assert line not in result.stdout + result.stderr, "a line of the key file was printed"
    return result


def text_units(stdout: str) -> dict[str, tuple[str, list[tuple[str, str, str]], dict[str, str]]]:
    """The text report read back: unit -> (status, [(field, observed, desired)], observations)."""
    units: dict[str, tuple[str, list, dict]] = {}
    current = None
    for line in stdout.splitlines():
        if match := re.match(r"^  ([a-z0-9-]+): (in sync|drifted|unreachable|failed)\b", line):
            current = match[1]
            units[current] = (match[2], [], {})
        elif current and (match := re.match(r"^      observed (.+?): (.*)$", line)):
            units[current][2][match[1]] = match[2]
        elif current and ARROW in line and line.startswith("      "):
            name, _, values = line.strip().partition(": ")
            observed, _, desired = values.partition(ARROW)
            units[current][1].append((name, observed, desired))
    return units


def json_units(report: dict) -> dict[str, tuple[str, list[tuple[str, str, str]], dict[str, str]]]:
    return {u["unit"]: (u["status"], [(d["field"], d["observed"], d["desired"]) for d in u["drift"]],
                        u["observations"]) for u in report["units"]}


def apply_order(stack: Path) -> list[str]:
    return [unit.key for unit in load(stack).graph.apply_order]


def test_a_converged_host_is_in_sync(template):
    stack = stack_file(template)
    text = run_check(stack, template.ssh.private_key)
    assert text.returncode == EXIT_IN_SYNC, text.stdout + text.stderr
    units = text_units(text.stdout)
    assert list(units) == apply_order(stack), "the probes run in the plan's order"
    assert {status for status, _, _ in units.values()} == {IN_SYNC}
    # Observations are shown, and an in-sync unit may have them.
    assert units["ct129-gpu-devices"][2]["minor of 0000:41:00.0"] == template.minor("0000:41:00.0")
    as_json = run_check(stack, template.ssh.private_key, "--json")
    assert as_json.returncode == EXIT_IN_SYNC
    report = json.loads(as_json.stdout)
    assert report["result"] == IN_SYNC and report["exitCode"] == EXIT_IN_SYNC
    assert json_units(report) == units


def test_the_key_may_come_from_the_file_an_environment_variable_names(template):
    result = run_check(stack_file(template), None, env={KEY_FILE_VARIABLE: str(template.ssh.private_key)})
    assert result.returncode == EXIT_IN_SYNC, result.stdout + result.stderr


@pytest.mark.parametrize("drift", [d for d in DRIFTS if d.name in ("devN removed from CT 129",
                                                                    "nvidia-persistenced disabled")],
                         ids=lambda d: d.name)
def test_drift_names_each_field_observed_and_desired(project, kpro5_snapshot, tmp_path, drift):
    host = Converged.restore(kpro5_snapshot, tmp_path / "bed", project)
    try:
        stack = stack_file(host.bed)
        drift.tamper(host.bed)
        text = run_check(stack, host.bed.ssh.private_key)
        as_json = run_check(stack, host.bed.ssh.private_key, "--json", "--verbose")
    finally:
        host.close()
    assert text.returncode == EXIT_DRIFT, text.stdout + text.stderr
    assert as_json.returncode == EXIT_DRIFT
    units = text_units(text.stdout)
    report = json.loads(as_json.stdout)
    assert report["result"] == DRIFTED and json_units(report) == units
    assert {unit for unit, (status, _, _) in units.items() if status == DRIFTED} == set(drift.shown)
    assert {status for unit, (status, _, _) in units.items() if unit not in drift.shown} == {IN_SYNC}
    desired = {unit.key: unit.desired for unit in load(stack).graph.apply_order}
    for unit, path in drift.shown.items():
        field = re.fullmatch(r'facts\["(.+)"\]', path)[1]
        fields = {name: (observed, wanted) for name, observed, wanted in units[unit][1]}
        observed, wanted = fields[field]
        assert wanted == desired[unit][field] and observed != wanted, fields
        assert f"      {field}: {observed}{ARROW}{wanted}" in text.stdout.splitlines()
    # --verbose shows the dial and each probe, on stderr only.
    assert "gpuhosts-ssh: dial" in as_json.stderr and "probe status=" in as_json.stderr


def test_an_unreachable_host_is_unreachable_not_drifted(template):
    stack = stack_file(template, port=free_port())
    text = run_check(stack, template.ssh.private_key, "--dial-attempts", "2")
    assert text.returncode == EXIT_ERROR, text.stdout + text.stderr
    units = text_units(text.stdout)
    assert list(units) == apply_order(stack)
    assert {status for status, _, _ in units.values()} == {UNREACHABLE}
    # Nothing listens at that port: refused once, not dialled again, and the reason said once for the host.
    assert text.stdout.count("could not reach") == 1 and "connection refused" in text.stdout, text.stdout
    assert "after 2 attempts" not in text.stdout, text.stdout
    assert all(line.endswith(": unreachable") for line in text.stdout.splitlines()
               if re.match(r"^  [a-z0-9-]+: unreachable", line)), text.stdout
    as_json = run_check(stack, template.ssh.private_key, "--dial-attempts", "2", "--json")
    report = json.loads(as_json.stdout)
    assert as_json.returncode == EXIT_ERROR and report["result"] == "error"
    assert {u["status"] for u in report["units"]} == {UNREACHABLE}
    assert {status for status, _, _ in json_units(report).values()} == {UNREACHABLE}


def test_a_host_with_another_key_than_the_pinned_one_is_refused(template, tmp_path):
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, capture_output=True)
    pinned = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    result = run_check(stack_file(template, hostKey=pinned), template.ssh.private_key, "--json")
    assert result.returncode == EXIT_ERROR
    report = json.loads(result.stdout)
    reasons = {u["reason"] for u in report["units"]}
    assert {u["status"] for u in report["units"]} == {UNREACHABLE} and len(reasons) == 1, reasons
    assert "another host key than the pinned one" in reasons.pop()


def test_a_key_the_host_does_not_authorise_names_the_option(template, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True,
                   capture_output=True)
    result = run_check(stack_file(template), stranger)
    assert result.returncode == EXIT_ERROR
    assert f"refused the key of --ssh-key {stranger}" in result.stdout, result.stdout


# --- bad input: one clear error naming the option or field, exit 1 ----------------------------------------------------
def _bad_port(bed: Bed, tmp_path: Path) -> Path:
    values = bed.values()
    values["host"]["ssh"]["port"] = 0
    return bed.write_stack(values, "Pulumi.kpro5-bad-port.yaml")


@pytest.mark.parametrize("case, expected", [
    ("no key", ["--ssh-key FILE", KEY_FILE_VARIABLE]),
    ("missing key file", ["--ssh-key", "cannot read the key file"]),
    ("missing file in the variable", [f"${KEY_FILE_VARIABLE}", "cannot read the key file"]),
    ("key readable by others", ["--ssh-key", "mode 0644", "chmod 600"]),
    ("not a key", ["--ssh-key", "is not an unencrypted ed25519"]),
    ("no stack file", ["does not exist", "--stack-file"]),
    ("bad stack field", ["gpuhosts:host.ssh.port"]),
    ("bad stack name", ["is not a stack name"]),
    ("unknown option", ["unrecognized arguments: --frobnicate"]),
])
def test_bad_input_is_an_error_naming_what_to_fix(template, tmp_path, monkeypatch, capsys, case, expected):
    monkeypatch.delenv(KEY_FILE_VARIABLE, raising=False)
    key = template.ssh.private_key
    stack = stack_file(template)
    shown_key = tmp_path / "shown"
    shown_key.write_text("not-a-key: hunter2-keep-this-quiet\n")
    shown_key.chmod(0o600)
    open_key = tmp_path / "open_key"
    shutil.copy(key, open_key)
    open_key.chmod(0o644)
    argv = {
        "no key": ["kpro5", "--stack-file", str(stack)],
        "missing key file": ["kpro5", "--stack-file", str(stack), "--ssh-key", str(tmp_path / "absent")],
        "missing file in the variable": ["kpro5", "--stack-file", str(stack)],
        "key readable by others": ["kpro5", "--stack-file", str(stack), "--ssh-key", str(open_key)],
        "not a key": ["kpro5", "--stack-file", str(stack), "--ssh-key", str(shown_key)],
        "no stack file": ["kpro5", "--stack-file", str(tmp_path / "absent.yaml"), "--ssh-key", str(key)],
        "bad stack field": ["kpro5", "--stack-file", str(_bad_port(template, tmp_path)), "--ssh-key", str(key)],
        "bad stack name": ["../kpro5", "--ssh-key", str(key)],
        "unknown option": ["kpro5", "--frobnicate"],
    }[case]
    if case == "missing file in the variable":
        monkeypatch.setenv(KEY_FILE_VARIABLE, str(tmp_path / "absent"))
    try:
        code = main(["check", *argv])
    except SystemExit as exit:
        code = exit.code
    captured = capsys.readouterr()
    output = captured.out + captured.err
    # Input refused before anything is done is 2 for every command (gpuhosts/exit_codes.py); a stack file that is
    # not there is an error reading it, 1, as for `gpuhosts plan`.
    assert code == (EXIT_ERROR if case == "no stack file" else EXIT_INVALID), output
    for words in expected:
        assert words in output, output
    for line in key_lines(key) + ["hunter2-keep-this-quiet"]:
        assert line not in output


def test_an_error_with_json_is_a_json_object_too(template, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(KEY_FILE_VARIABLE, raising=False)
    assert main(["check", "kpro5", "--stack-file", str(stack_file(template)), "--json"]) == EXIT_INVALID
    report = json.loads(capsys.readouterr().out)
    assert report["result"] == "error" and "--ssh-key FILE" in report["error"]


# --- the documented scheduled check --------------------------------------------------------------------------------------
def readme_units() -> dict[str, str]:
    """name -> text of each systemd unit in docs/operations.md's `gpuhosts check` section (its first line names its
    path)."""
    readme = (PROJECT / "docs" / "operations.md").read_text()
    section = readme.split("## Checking a live host: `gpuhosts check`\n", 1)[1].split("\n## ", 1)[0]
    units = {}
    for block in re.findall(r"^```ini\n(.*?)^```$", section, re.M | re.S):
        first, _, body = block.partition("\n")
        path = re.fullmatch(r"# (/etc/systemd/system/[\w.-]+)", first)[1]
        units[path.rsplit("/", 1)[1]] = body
    return units


@pytest.mark.skipif(ANALYZE is None or not SYSTEM_UNITS.is_dir(), reason="systemd-analyze is not here")
def test_the_documented_timer_and_service_pass_systemds_verifier(tmp_path):
    units = readme_units()
    assert set(units) == {"gpuhosts-check-kpro5.service", "gpuhosts-check-kpro5.timer"}
    service, timer = units["gpuhosts-check-kpro5.service"], units["gpuhosts-check-kpro5.timer"]
    exec_start = re.search(r"^ExecStart=(.+)$", service, re.M)[1].split()
    assert exec_start[1:] == ["check", "kpro5", "--json"] and exec_start[0].endswith("/bin/gpuhosts")
    # Drift (2) must fail the service, as an error (1) does: no exit status but 0 may count as success.
    assert "SuccessExitStatus" not in service and "Type=oneshot" in service
    assert f"{KEY_FILE_VARIABLE}=" in service
    assert re.search(r"^OnCalendar=daily$", timer, re.M) and re.search(r"^Persistent=true$", timer, re.M)

    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    for name, text in units.items():
        (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)
        (root / "etc/systemd/system" / name).write_text(text)
    program = root / exec_start[0].lstrip("/")
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    result = subprocess.run([ANALYZE, "verify", "--man=no", f"--root={root}", *sorted(units)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "gpuhosts-check" not in result.stdout + result.stderr, \
        result.stdout + result.stderr
