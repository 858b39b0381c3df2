"""A refresh's one command per host (gpuhosts/probe_batch.py): what each probe gives in the batch is what it gives
alone, byte for byte and status for status, and the provider plans the same probes the program registers."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

from gpuhosts.plan import load_hosts, read_stack_file, stand_in_secrets
from gpuhosts.probe_batch import (NOT_ATTESTED_STATUS, SECRET_STAND_IN, BatchFraming, PlannedProbe, attestation,
                                  batch_script, config_values, parse_batch, planned_probes)
from gpuhosts.render import render
from gpuhosts.ssh import UPLOAD_THEN_RUN, Completed

ROOT = Path(__file__).resolve().parent.parent
BOUNDARY = "gpuhosts-probe-0123456789abcdef01234567"

# Each probe as a case: what it prints, where, and how it ends.
PROBES = [
    PlannedProbe("facts", "printf 'GPUHOSTS_FACT a=1\\nGPUHOSTS_FACT b=two words\\n'", 600),
    PlannedProbe("silent", "true", 600),
    PlannedProbe("no-newline", "printf 'no newline at the end'", 600),
    PlannedProbe("stderr-and-status", "echo out; echo 'err: refused' >&2; exit 3", 600),
    PlannedProbe("binary", "printf '\\000\\377\\n\\n%s\\n' 'gpuhosts-probe-0123456789abcdef01234567 1 0 0 0'", 600),
    PlannedProbe("reads-stdin", "cat; echo after", 600),
    PlannedProbe("heredoc-inside", "cat <<'EOF'\nGPUHOSTS_FACT inner=yes\nEOF", 600),
    PlannedProbe("large", "head -c 200000 /dev/zero | tr '\\0' x; echo; echo tail >&2", 600),
]


def alone(probe: PlannedProbe) -> Completed:
    """The probe as the provider runs it alone: its script on stdin, through the command of every operation."""
    command = UPLOAD_THEN_RUN + render("common/run.sh.j2", path=None, unit=probe.unit, operation="probe", owner="",
                                       timeout_s=probe.limit_s)
    done = subprocess.run(["bash", "-c", command], input=probe.script.encode(), capture_output=True, timeout=120)
    return Completed(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))


KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nthe stack's key\n-----END OPENSSH PRIVATE KEY-----\n"
HOST = ("127.0.0.1", 22, "root")
ATTESTED = attestation(KEY, HOST, PROBES)


def run_batch_script(root: Path, probes: list[PlannedProbe], parallel: int = 4) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-s"], input=batch_script(probes, BOUNDARY, ATTESTED, parallel).encode(),
                          capture_output=True, timeout=120, env={"PATH": "/usr/bin:/bin", "GPUHOSTS_HOST_ROOT": str(root)})


def attested_root(tmp_path: Path, value: str = ATTESTED) -> Path:
    owners = tmp_path / "host" / "var/lib/gpuhosts/owners"
    owners.mkdir(parents=True)
    (owners / ".probe-plan").write_text(value + "\n")
    return tmp_path / "host"


def batched(root: Path, probes: list[PlannedProbe], parallel: int = 4) -> dict[str, Completed]:
    done = run_batch_script(root, probes, parallel)
    assert done.returncode == 0, done.stderr
    return parse_batch(done.stdout, probes, BOUNDARY)


@pytest.mark.parametrize("parallel", [1, 4])
def test_each_probe_in_the_batch_gives_what_it_gives_alone(parallel, tmp_path):
    together = batched(attested_root(tmp_path), PROBES, parallel)
    assert list(together) == [probe.unit for probe in PROBES]
    for probe in PROBES:
        assert together[probe.unit] == alone(probe), probe.unit


def test_a_probe_holding_the_delimiter_is_refused_not_cut_short():
    hostile = PlannedProbe("hostile", "cat <<'X'\nGPUHOSTS_PROBE\necho ran on the outer shell\nX", 600)
    with pytest.raises(ValueError, match="here-document"):
        batch_script([hostile], BOUNDARY, ATTESTED)


@pytest.mark.parametrize("held", ["", "0" * 64, attestation(KEY, HOST, PROBES[:-1]),
                                  attestation("another key", HOST, PROBES), attestation(KEY, ("10.0.0.9", 22, "root"), PROBES)],
                         ids=["none", "garbage", "other probes", "other key", "other host"])
def test_probes_the_host_holds_no_attestation_of_do_not_run(held, tmp_path):
    """A config edited in the state plans other probes than the last `up` attested: the batch runs none of them."""
    root = attested_root(tmp_path, held) if held else tmp_path / "host"
    marker = tmp_path / "ran"
    done = run_batch_script(root, [PlannedProbe("planted", f"touch {marker}", 600), *PROBES])
    assert done.returncode == NOT_ATTESTED_STATUS and not marker.exists(), done.stderr


def test_an_ensure_leaves_the_attestation_and_the_last_teardown_takes_it(tmp_path):
    root = tmp_path / "host"
    attested = root / "var/lib/gpuhosts/owners/.probe-plan"

    def run(unit: str, operation: str, plan: str) -> None:
        script = tmp_path / f"{unit}.sh"
        script.write_text("echo done\n")
        command = render("common/run.sh.j2", path=str(script), unit=unit, operation=operation, owner="id-" + unit,
                         timeout_s=60, probe_plan=plan)
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "GPUHOSTS_HOST_ROOT": str(root)})
        assert done.returncode == 0, done.stderr

    run("a", "ensure", "plan-1")
    run("b", "ensure", "plan-2")
    assert attested.read_text() == "plan-2\n"
    run("a", "teardown", "plan-3")
    assert attested.read_text() == "plan-3\n"
    run("b", "teardown", "plan-4")
    assert not attested.exists() and not (root / "var/lib/gpuhosts").exists()


@pytest.mark.parametrize("output, problem", [
    (b"", "no frame for probe 1"),
    (f"\n{BOUNDARY} 1 0 5 0\nabc".encode(), "cut short"),
    (f"\n{BOUNDARY} 2 0 0 0\n".encode(), "malformed frame"),
    (f"\n{BOUNDARY} 1 zero 0 0\n".encode(), "malformed frame"),
])
def test_output_that_is_not_the_batch_framing_is_refused(output, problem):
    with pytest.raises(BatchFraming, match=problem):
        parse_batch(output, PROBES[:1], BOUNDARY)


def provider_config(stack_file: Path) -> dict[str, str]:
    """The config `configure()` hands the provider: every gpuhosts:* key, objects as JSON text, secrets decrypted."""
    values, secure = read_stack_file(stack_file)
    values, secure, _ = stand_in_secrets(values, secure)
    return {f"gpuhosts:{name}": ("decrypted-secret-value" if name in secure else
                                 value if isinstance(value, str) else json.dumps(value))
            for name, value in values.items()}


def program_probes(stack_file: Path) -> dict[tuple[str, int, str], dict[str, str]]:
    values, secure = read_stack_file(stack_file)
    values, secure, _ = stand_in_secrets(values, secure)
    hosts, _ = load_hosts(values, secure)
    ssh = [entry["ssh"] for entry in values["hosts"]] if "hosts" in values else \
        [(values.get("host") or values.get("node"))["ssh"]]
    return {(s["host"], s.get("port", 22), s.get("user", "root")): {unit.key: unit.probe for unit in graph}
            for s, (_, graph, _) in zip(ssh, hosts)}


def fleet_stack(tmp_path: Path) -> Path:
    import yaml

    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.kpro5.yaml").read_text())
    config = document["config"]
    host = {**config.pop("gpuhosts:host"), "gpus": config.pop("gpuhosts:gpus"),
            "containers": config.pop("gpuhosts:containers"), "services": config.pop("gpuhosts:services"),
            "benchmarks": config.pop("gpuhosts:benchmarks", [])}
    second = copy.deepcopy(host)
    second["name"], second["ssh"] = "kpro7", {**host["ssh"], "host": "kpro7.example.invalid"}
    config["gpuhosts:hosts"] = [host, second]
    path = tmp_path / "Pulumi.fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.parametrize("stack", ["kpro5", "trainer", "fleet"])
def test_the_provider_plans_the_probes_the_program_registers(stack, tmp_path):
    stack_file = fleet_stack(tmp_path) if stack == "fleet" else ROOT / "stacks" / f"Pulumi.{stack}.yaml"
    planned = planned_probes(provider_config(stack_file))
    assert {host: {unit: probe.script for unit, probe in units.items()} for host, units in planned.items()} == \
        program_probes(stack_file)
    assert all(probe.limit_s > 0 for units in planned.values() for probe in units.values())


def test_secrets_reach_the_plan_only_as_stand_ins():
    values, secure = config_values({"gpuhosts:sshPrivateKey": "-----BEGIN KEY-----", "gpuhosts:llmApiKey": "sk-1",
                                    "gpuhosts:host": '{"name": "kpro5"}', "other:thing": "x"})
    assert values == {"sshPrivateKey": SECRET_STAND_IN, "llmApiKey": SECRET_STAND_IN, "host": {"name": "kpro5"}}
    assert secure == {"sshPrivateKey", "llmApiKey"}
