"""Drift: a host changed by hand is shown by `pulumi preview` (unit and field), repaired by `pulumi up` through that
unit's ensure alone, and clean afterwards; drift that ensure must not repair is shown and refused, nothing changed.

The refresh runs each unit's read-only probe through the host-unit provider (gpuhosts/provider.py `read`); the
cases are data (tests/lifecycle/drifts.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from engine import ApplyError
from engine_standin import Engine as EngineStandin, start_engine
from fakehost.hub import HubApi
from lifecycle.drifts import DRIFTS, Drift
from sshhost import free_port
from sshhost.bed import PROJECT, SECRETS, Bed, names
from trainer_node import TrainerBed


@pytest.fixture(scope="module")
def standin():
    port = free_port()
    server = start_engine(EngineStandin(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=SECRETS["llmApiKey"]),
                          port)
    yield port
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def kpro5_template(tmp_path_factory, standin):
    bed = Bed.seed(tmp_path_factory.mktemp("drift") / "template")
    values = bed.services_values(standin, free_port())
    bed.up(values)
    yield bed, values
    bed.close()


# The stack file `gpuhosts check` reads: the SSH key only as a `secure:` value the Pulumi CLI alone decrypts.
SECURE = {"secure": "v1:AAABAGxvY2tlZC1ieS10aGUtY2xpLW5vdC1oZXJlCg=="}


def deep_check(bed, values) -> tuple[int, dict]:
    """`gpuhosts check kpro5 --deep --json` against the bed, the Hub's listing served from its own registry."""
    stack = bed.write_stack({**values, "sshPrivateKey": SECURE})
    api = HubApi(bed.tree)
    try:
        environment = {k: v for k, v in os.environ.items() if k not in ("GPUHOSTS_SSH_KEY_FILE", "HF_TOKEN")}
        result = subprocess.run([sys.executable, "-m", "gpuhosts.cli", "check", "kpro5", "--stack-file", str(stack),
                                 "--ssh-key", str(bed.ssh.private_key), "--deep", "--json"], capture_output=True,
                                text=True, cwd=PROJECT, env={**environment, "HF_ENDPOINT": api.endpoint}, timeout=300)
    finally:
        api.close()
    assert re.search(r"^deep-check: ct129-model-qwen3-6-27b bytes=\d+ seconds=", result.stderr, re.M), result.stderr
    return result.returncode, json.loads(result.stdout)


def check_drift(bed, drift: Drift, values=None) -> None:
    program = bed.program(values)
    assert bed.preview(program=program).changed() == {}, "not in sync before the change"
    drift.tamper(bed)
    if drift.deep:
        assert bed.preview(program=program).changed() == {}, "the refresh's samples were meant to miss this"
        code, report = deep_check(bed, values)
        drifted = {u["unit"]: [d["field"] for d in u["drift"]] for u in report["units"] if u["status"] == "drifted"}
        assert code == 2 and drifted == {unit: [field] for unit, field in drift.deep.items()}, report
        drift.fix(bed)
    preview = bed.preview(program=program)
    changed = preview.changed()
    assert set(changed) == set(drift.shown), {k: v.diffs for k, v in changed.items()}
    for unit, path in drift.shown.items():
        assert changed[unit].operation == "update" and path in changed[unit].diffs, (unit, changed[unit].diffs)
    for unit, words in drift.names.items():
        value = preview.facts[unit][re.fullmatch(r'facts\["(.+)"\]', drift.shown[unit])[1]]
        assert words in value, (unit, value)
    if drift.refuse:
        before = bed.digest()
        with pytest.raises(ApplyError) as caught:
            bed.up(program=program)
        assert "refused:" in str(caught.value) and drift.refuse in str(caught.value), str(caught.value)
        assert bed.digest() == before, "the host changed while refusing"
        assert set(bed.preview(program=program).changed()) == set(drift.shown), "the drift is no longer shown"
        return
    ops = bed.up(program=program)
    assert sorted(names(ops)) == sorted(drift.repairs), names(ops)
    assert all(op.operation == "update" for op in ops if op.operation != "read")
    for _ in range(2):
        again = bed.preview(program=program)
        assert again.changed() == {} and again.refreshed == {}, again.changed()
    if drift.deep:
        code, report = deep_check(bed, values)
        assert code == 0, [u for u in report["units"] if u["status"] != "in sync"]


@pytest.mark.parametrize("drift", [d for d in DRIFTS if d.stack == "kpro5"], ids=lambda d: d.name)
def test_kpro5_drift_is_shown_and_repaired(kpro5_template, tmp_path, drift):
    template, values = kpro5_template
    bed = Bed.copy_of(template, tmp_path / "bed")
    try:
        values = dict(values, host={**values["host"], "ssh": {**values["host"]["ssh"], "port": bed.ssh.port,
                                                             "hostKey": bed.ssh.host_key}})
        check_drift(bed, drift, values)
    finally:
        bed.close()


@pytest.mark.parametrize("drift", [d for d in DRIFTS if d.stack == "trainer"], ids=lambda d: d.name)
def test_trainer_drift_is_shown_and_repaired(tmp_path, drift):
    bed = TrainerBed(tmp_path)
    try:
        bed.up()
        check_drift(bed, drift)
    finally:
        bed.close()
