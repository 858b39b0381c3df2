"""The VM table (gpuhosts/hostside/vm_table.py) against its case table (tests/cases/vm_table.yaml): Proxmox's API
answers in, the rows the vfio binding and the containers' guest check read out, no host."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from decision_tables import table
from gpuhosts.hostside import vm_table

TABLE = table("vm_table")
CASES = TABLE["cases"]


def framed(answers: dict) -> bytes:
    """The records templates/common/vms.sh.j2 pipes in: each answer as pvesh prints it, framed by its length."""
    out = b""
    for name, answer in answers.items():
        body = json.dumps(answer, sort_keys=True, separators=(",", ":")).encode()
        out += f"api {name} {len(body)}\n".encode() + body + b"\n"
    return out


def run(argv: list[str], stdin: bytes) -> tuple[int, list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = vm_table.main(argv, io.BytesIO(stdin))
    return status, out.getvalue().splitlines()


def answers_of(case: dict) -> dict:
    return {**TABLE["defaults"], **case["answers"]}


@pytest.mark.parametrize("case", [c for c in CASES if "rows" in c], ids=lambda c: c["name"])
def test_rows(case):
    assert run(["rows", "kpro5"], framed(answers_of(case))) == (0, case["rows"])


@pytest.mark.parametrize("case", [c for c in CASES if "vmids" in c], ids=lambda c: c["name"])
def test_vmids_name_the_configs_to_read_next(case):
    # What the script reads first: the list alone.
    assert run(["vmids"], framed({"qemu-list": answers_of(case)["qemu-list"]})) == (0, case["vmids"])


@pytest.mark.parametrize("case", [c for c in CASES if "error" in c], ids=lambda c: c["name"])
def test_answers_it_cannot_read_are_an_error_naming_why(case):
    status, lines = run(["rows", "kpro5"], framed(answers_of(case)))
    assert status == 1 and len(lines) == 1 and case["error"] in lines[0], lines


@pytest.mark.parametrize("case", TABLE["malformed"], ids=lambda c: c["name"])
def test_malformed_records_are_an_error_naming_why(case):
    status, lines = run(["rows", "kpro5"], case["stdin"].encode())
    assert status == 1 and case["error"] in lines[0], lines


def test_usage_is_refused():
    assert run(["rows"], b"")[0] == 2 and run(["columns", "kpro5"], b"")[0] == 2
