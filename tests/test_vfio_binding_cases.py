"""VfioBinding's decisions against their case table (tests/cases/vfio_binding.yaml): facts in, actions out, no host.

The facts reach the decisions the way the unit's scripts hand them over (gpuhosts/hostside/vfio_binding.py, its
docstring): records and length-framed files on stdin, the plan as JSON, one action a line back.
"""

from __future__ import annotations

import base64
import io
import json
import re

import pytest

from decision_tables import decided as run_decision, refusals_without_case, table
from gpuhosts.hostside import vfio_binding as decisions

TABLE = table("vfio_binding")
DEFAULTS = TABLE["defaults"]
CASES = TABLE["cases"]


def wire(case: dict) -> bytes:
    """The facts as templates/vfio_binding/decide.sh.j2 `vfio_facts` prints them."""
    out = io.BytesIO()
    for function in case.get("functions", DEFAULTS["functions"]):
        out.write(f"function {function}\n".encode())
    for name, state in {**DEFAULTS["modules"], **case.get("modules", {})}.items():
        out.write(f"module {name} {state}\n".encode())
    for row in case.get("vms", DEFAULTS["vms"]):
        out.write(f"vm {row}\n".encode())
    if "vm_table_error" in case:
        out.write(f"vm-table-error {case['vm_table_error']}\n".encode())
    for name, text in {**DEFAULTS["files"], **case.get("files", {})}.items():
        if text is None:
            out.write(f"missing {name}\n".encode())
        else:
            body = text.encode()
            out.write(f"file {name} {len(body)}\n".encode() + body + b"\n")
    for row in case.get("original", []):
        out.write(f"original {row}\n".encode())
    return out.getvalue()


def decided(case: dict) -> list[list[str]]:
    plan = json.dumps({**DEFAULTS["plan"], **case.get("plan", {})})
    actions = run_decision(decisions, [case["decide"], plan], io.BytesIO(wire(case)))
    for action in actions:
        if action[0] == "write-cmdline":
            action[2] = base64.b64decode(action[2]).decode()
    return actions


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_decision(case):
    assert decided(case) == [[str(part) for part in action] for action in case["expect"]]


def test_every_action_and_every_refusal_has_its_case():
    """A decision the module can take without a case here fails this table: each verb is taken by a case, and the
    words of each refusal the module writes are in a case's refusal."""
    assert set(decisions.VERBS) - {action[0] for case in CASES for action in case["expect"]} == set()
    refusals = [action[1] for case in CASES for action in case["expect"] if action[0] == "refuse"]
    refusals += [action[2].removeprefix("unreadable: ") for case in CASES for action in case["expect"]
                 if action[0] == "fact" and str(action[2]).startswith("unreadable: ")]
    assert refusals_without_case(decisions, refusals) == []


MALFORMED = [
    (b"function 0000:01:00.0 0x10de\n", "function needs 5 values"),
    (b"module nvidia maybe\n", "neither loaded nor absent"),
    (b"file proc-cmdline 10\nshort\n", "10 bytes and a newline were promised, 6 came"),
    (b"file proc-cmdline\nx\n", "a file record needs a name and a length"),
    (b"gpu 0000:01:00.0\n", "unknown record 'gpu'"),
    (b"module nvidia loaded", "the last record has no newline"),
]


@pytest.mark.parametrize("data, words", MALFORMED, ids=[w for _, w in MALFORMED])
def test_malformed_facts_are_refused(data, words):
    with pytest.raises(decisions.FactsError, match=re.escape(words)):
        decisions.read_facts(data)


def test_a_framed_file_may_hold_anything():
    text = "line one\nfile grub /etc/default/grub 3\nmissing x\n\x00\xff\n"
    body = text.encode("utf-8", "surrogateescape")
    facts = decisions.read_facts(f"file kernel-cmdline {len(body)}\n".encode() + body + b"\nmissing added-args\n")
    assert facts.files == {"kernel-cmdline": text, "added-args": None}


def test_a_message_never_breaks_the_action_lines():
    assert decisions.format_actions([("refuse", "a\tb\nc"), ("reboot",)]) == "refuse\ta b c\nreboot\n"
