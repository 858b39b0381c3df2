"""The guest tables (gpuhosts/hostside/guest_table.py) against their case table (tests/cases/guest_table.yaml):
Proxmox's API answers in, the rows the vfio binding and the containers' guest check read out, no host."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from decision_tables import table
from gpuhosts.hostside import guest_table

TABLE = table("guest_table")
CASES = TABLE["cases"]
CT_CASES = TABLE["ct_cases"]
OWN_CASES = TABLE["own_cases"]


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
        status = guest_table.main(argv, io.BytesIO(stdin))
    return status, out.getvalue().splitlines()


def answers_of(case: dict) -> dict:
    return {**TABLE["defaults"], **case["answers"]}


@pytest.mark.parametrize("case", [c for c in CASES if "rows" in c], ids=lambda c: c["name"])
def test_vm_rows(case):
    assert run(["vm-rows", "kpro5"], framed(answers_of(case))) == (0, case["rows"])


@pytest.mark.parametrize("case", [c for c in CT_CASES if "rows" in c], ids=lambda c: c["name"])
def test_ct_rows_of_the_other_running_containers(case):
    # What the script reads first: the list alone, then the config of each container `ctids` names.
    listed = {"lxc-list": case["answers"]["lxc-list"]}
    assert run(["ctids", "129"], framed(listed)) == (0, case["ctids"])
    configs = {f"lxc-config {vmid}": case["answers"].get(f"lxc-config {vmid}", {}) for vmid in case["ctids"]}
    assert run(["ct-rows"], framed({**listed, **configs})) == (0, case["rows"])


@pytest.mark.parametrize("case", [c for c in CT_CASES if "error" in c], ids=lambda c: c["name"])
def test_a_container_answer_it_cannot_read_is_an_error_naming_why(case):
    status, lines = run(["ct-rows"], framed(case["answers"]))
    assert status == 1 and case["error"] in lines[0], lines


@pytest.mark.parametrize("case, what", [(c, what) for c in OWN_CASES for what in c.get("entries", {})],
                         ids=lambda v: v if isinstance(v, str) else v["name"])
def test_a_containers_own_entries(case, what):
    assert run(["ct-config", what], framed({"lxc-config 129": case["config"]})) == (0, case["entries"][what])


@pytest.mark.parametrize("case", [c for c in OWN_CASES if "error" in c], ids=lambda c: c["name"])
def test_a_containers_own_config_it_cannot_read_is_an_error_naming_why(case):
    status, lines = run(["ct-config", case["what"]], framed({"lxc-config 129": case["config"]}))
    assert status == 1 and case["error"] in lines[0], lines


def test_a_containers_own_entries_need_exactly_one_config():
    two = framed({"lxc-config 129": {}, "lxc-config 130": {}})
    assert run(["ct-config", "dev"], two)[0] == 1 and run(["ct-config", "dev"], b"")[0] == 1


@pytest.mark.parametrize("case", [c for c in CASES if "vmids" in c], ids=lambda c: c["name"])
def test_vmids_name_the_configs_to_read_next(case):
    # What the script reads first: the list alone.
    assert run(["vmids"], framed({"qemu-list": answers_of(case)["qemu-list"]})) == (0, case["vmids"])


@pytest.mark.parametrize("case", [c for c in CASES if "error" in c], ids=lambda c: c["name"])
def test_answers_it_cannot_read_are_an_error_naming_why(case):
    status, lines = run(["vm-rows", "kpro5"], framed(answers_of(case)))
    assert status == 1 and len(lines) == 1 and case["error"] in lines[0], lines


@pytest.mark.parametrize("case", TABLE["malformed"], ids=lambda c: c["name"])
def test_malformed_records_are_an_error_naming_why(case):
    status, lines = run(["vm-rows", "kpro5"], case["stdin"].encode())
    assert status == 1 and case["error"] in lines[0], lines


def test_usage_is_refused():
    assert [run(argv, b"")[0] for argv in (["vm-rows"], ["columns", "kpro5"], ["ctids", "ct129"], ["ct-rows", "x"],
                                                ["ct-config"], ["ct-config", "hostname"])] == [2, 2, 2, 2, 2, 2]
