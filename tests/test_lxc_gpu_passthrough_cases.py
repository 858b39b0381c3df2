"""LxcGpuPassthrough's decisions against their case table (tests/cases/lxc_gpu_passthrough.yaml): no host.

A case's facts are the defaults', less `facts_without`, plus `facts_with` and `with`; or `facts` alone.
"""

from __future__ import annotations

import io
import json
import re

import pytest

from decision_tables import decided as run_decision, flat, refusals_without_case, table
from gpuhosts.hostside import lxc_gpu_passthrough as decisions

TABLE = table("lxc_gpu_passthrough")
DEFAULTS = TABLE["defaults"]
CASES = TABLE["cases"]


def framed(record: str, config: dict) -> bytes:
    body = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return f"{record} {len(body)}\n".encode() + body + b"\n"


def facts_of(case: dict) -> bytes:
    """The records as the ensure gathers them: the configs framed, then the others."""
    if "config_error" in case:
        out = f"config-error {case['config_error']}\n".encode()
    else:
        config = case.get("config", DEFAULTS["config"])
        out = framed("config", config) + framed("current-config", case.get("current", config))
    records = [r for r in DEFAULTS["facts"] if r not in case.get("facts_without", [])]
    for item in case.get("facts_with", []):
        records += item if isinstance(item, list) else [item]
    return out + "".join(f"{record}\n" for record in records).encode()


def decided(case: dict) -> list[list[str]]:
    return run_decision(decisions, [case.get("decide", "ensure"),
                                    json.dumps({**DEFAULTS["plan"], **case.get("plan", {})})], io.BytesIO(facts_of(case)))


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_decision(case):
    assert decided(case) == flat(case["expect"])


def test_every_action_and_every_refusal_has_its_case():
    assert set(decisions.VERBS) - {action[0] for case in CASES for action in flat(case["expect"])} == set()
    refusals = [action[1] for case in CASES for action in flat(case["expect"]) if action[0] == "refuse"]
    assert refusals_without_case(decisions, refusals) == []


@pytest.mark.parametrize("data, words", [
    (b"container paused\n", "neither running nor stopped"),
    (b"gpu 0000:41:00.0 nvidia\n", "gpu needs an address, a driver and a minor"),
    (b"node /dev/nvidia0 here\n", "node needs a path and present or absent"),
    (b"lxc.cgroup2.devices.allow c 195:* rwm\n", "unknown record"),
    (b'config 9\n{"a"\n', "config: 9 bytes and a newline were promised, 5 came"),
    (b"config 2\n{]\n", "config is not JSON"),
    (b"current-config 2\n[]\n", "not a JSON object"),
    (b"config\n{}\n", "config needs its length"),
])
def test_malformed_facts_are_refused(data, words):
    with pytest.raises(decisions.FactsError, match=re.escape(words)):
        decisions.read_facts(data)


@pytest.mark.parametrize("path, fix", [
    ("/dev/nvidia-uvm-tools", "nvidia-modprobe -u -c=0 makes it"),
    ("/dev/nvidiactl", "nvidia-modprobe -c=255 makes it"),
    ("/dev/nvidia12", "nvidia-modprobe -c=12 makes it"),
    ("/dev/dri/card0", "its driver makes it"),
])
def test_node_fix(path, fix):
    assert decisions.node_fix(path) == fix
