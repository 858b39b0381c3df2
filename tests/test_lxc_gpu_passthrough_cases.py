"""LxcGpuPassthrough's decisions against their case table (tests/cases/lxc_gpu_passthrough.yaml): no host.

A case's facts are the defaults', less `facts_without`, plus `facts_with` and `with`; or `facts` alone.
"""

from __future__ import annotations

import json
import re

import pytest

from decision_tables import decided as run_decision, refusals_without_case, table
from gpuhosts.hostside import lxc_gpu_passthrough as decisions

TABLE = table("lxc_gpu_passthrough")
DEFAULTS = TABLE["defaults"]
CASES = TABLE["cases"]


def facts_of(case: dict) -> str:
    if "facts" in case:
        records = list(case["facts"])
    else:
        records = [r for r in DEFAULTS["facts"] if r not in case.get("facts_without", [])]
        records += case.get("facts_with", [])
    records = [r for r in records if r not in case.get("facts_without", [])]
    for item in case.get("with", []):
        records += item if isinstance(item, list) else [item]
    return "".join(f"{record}\n" for record in records)


def flat(expect: list) -> list[list[str]]:
    out = []
    for item in expect:
        if item and isinstance(item[0], list):
            out += flat(item)
        else:
            out.append([str(part) for part in item])
    return out


def decided(case: dict) -> list[list[str]]:
    return run_decision(decisions, ["ensure", json.dumps({**DEFAULTS["plan"], **case.get("plan", {})})],
                        facts_of(case))


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_decision(case):
    assert decided(case) == flat(case["expect"])


def test_every_action_and_every_refusal_has_its_case():
    assert set(decisions.VERBS) - {action[0] for case in CASES for action in flat(case["expect"])} == set()
    refusals = [action[1] for case in CASES for action in flat(case["expect"]) if action[0] == "refuse"]
    assert refusals_without_case(decisions, refusals) == []


@pytest.mark.parametrize("record, words", [
    ("container paused", "neither absent, running nor stopped"),
    ("gpu 0000:41:00.0 nvidia", "gpu needs an address, a driver and a minor"),
    ("node /dev/nvidia0 here", "node needs a path and present or absent"),
    ("lxc.cgroup2.devices.allow c 195:* rwm", "unknown record"),
])
def test_malformed_facts_are_refused(record, words):
    with pytest.raises(decisions.FactsError, match=re.escape(words)):
        decisions.read_facts(record + "\n")


@pytest.mark.parametrize("path, fix", [
    ("/dev/nvidia-uvm-tools", "nvidia-modprobe -u -c=0 makes it"),
    ("/dev/nvidiactl", "nvidia-modprobe -c=255 makes it"),
    ("/dev/nvidia12", "nvidia-modprobe -c=12 makes it"),
    ("/dev/dri/card0", "its driver makes it"),
])
def test_node_fix(path, fix):
    assert decisions.node_fix(path) == fix
