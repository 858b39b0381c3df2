"""NvidiaDriver's decisions against their case table (tests/cases/nvidia_driver.yaml), and its Debian version
comparison against dpkg's own (`dpkg --compare-versions`)."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess

import pytest

from decision_tables import decided as run_decision, flat, refusals_without_case, table
from gpuhosts.hostside import nvidia_driver as decisions

TABLE = table("nvidia_driver")
DEFAULTS = TABLE["defaults"]
CASES = TABLE["cases"]


def record_name(record: str) -> str:
    words = record.split(" ")
    return " ".join(words[:2]) if words[0] in ("efivar", "package", "gpu", "dkms") else words[0]


def facts_of(case: dict) -> str:
    records = {record_name(r): r for r in DEFAULTS["facts"]}
    records.update({record_name(r): r for r in case.get("facts", [])})
    return "".join(f"{record}\n" for record in records.values())


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_decision(case):
    plan = json.dumps({**DEFAULTS["plan"], **case.get("plan", {})})
    assert run_decision(decisions, [case["decide"], plan], io.BytesIO(facts_of(case).encode())) == \
        flat(case["expect"])


def test_every_action_and_every_refusal_has_its_case():
    assert set(decisions.VERBS) - {action[0] for case in CASES for action in flat(case["expect"])} == set()
    refusals = [action[1] for case in CASES for action in flat(case["expect"]) if action[0] == "refuse"]
    assert refusals_without_case(decisions, refusals) == []


# Versions as Proxmox and Debian write them: epochs, revisions, tildes, letters, leading zeros.
VERSIONS = ["5.0.7", "5.0.4", "5.2.2", "6.0.4", "6.0.10", "6.0.4-1", "6.0.4~rc1", "6.0.4+pve1", "1:5.0", "5.0.07",
            "5.0.7a", "5.0.7-1~bpo12+1", "0.9", "10", "5.0.7.1", "2:0", "5.0~", "5.0", "5.0-0", "5.a", "5.A"]


@pytest.mark.skipif(not shutil.which("dpkg"), reason="dpkg is the oracle")
@pytest.mark.parametrize("a", VERSIONS)
def test_versions_compare_as_dpkg_compares_them(a):
    for b in VERSIONS:
        expected = next(op for op in ("lt", "eq", "gt") if subprocess.run(
            ["dpkg", "--compare-versions", a, op, b]).returncode == 0)
        got = decisions.compare_versions(a, b)
        assert {"lt": got < 0, "eq": got == 0, "gt": got > 0}[expected], (a, b, expected, got)


@pytest.mark.parametrize("record, words", [
    ("efi maybe", "efi: 'maybe' is neither present nor absent"),
    ("package dkms", "package needs 2 values"),
    ("gpu 0000:41:00.0", "gpu needs 2 values"),
    ("secureboot on", "unknown record 'secureboot'"),
])
def test_malformed_facts_are_refused(record, words):
    with pytest.raises(decisions.FactsError, match=re.escape(words)):
        decisions.read_facts((record + "\n").encode())


@pytest.mark.parametrize("pveversion, version", [
    ("pve-manager/8.3.0/c1689ccb1065a83b (running kernel: 6.8.12-4-pve)", "8.3.0"),
    ("pve-manager/9.1.19/a1b2c3d4 (running kernel: 6.17.2-1-pve)", "9.1.19"),
    ("", ""),
    ("proxmox-ve: 8.3.0 (running kernel: 6.8.12-4-pve)", ""),
])
def test_pve_manager_version(pveversion, version):
    assert decisions.pve_version(pveversion) == version
