"""A stack converged before the resource tree keeps every resource: the units' aliases carry their state over.

The flat program (renames.py `flat_layout`: one `pulumi-python:dynamic:Resource` per unit directly under the host's
or node's component, as the program registered them before each unit kind had its type) converges a simulated
kpro5 with its services and a simulated training node; `up` of today's program then creates and deletes no unit
and runs no ensure or teardown: its only operations are the refresh's reads. Only the new components are created,
and they are entries of the state alone.
"""

from __future__ import annotations

import pytest

from engine_standin import Engine as EngineStandin, start_engine
from lifecycle.renames import FLAT_UNIT_TYPE, carry_over, is_unit
from sshhost import free_port
from sshhost.bed import SECRETS, Bed
from trainer_node import TrainerBed


@pytest.fixture
def kpro5(tmp_path):
    port = free_port()
    server = start_engine(EngineStandin(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=SECRETS["llmApiKey"]),
                          port)
    bed = Bed.seed(tmp_path / "kpro5")
    try:
        yield bed, bed.program(bed.services_values(port, free_port()))
    finally:
        bed.close()
        server.shutdown()
        server.server_close()


@pytest.fixture
def trainer(tmp_path):
    bed = TrainerBed(tmp_path / "trainer")
    try:
        yield bed, bed.program()
    finally:
        bed.close()


@pytest.mark.parametrize("stack", ["kpro5", "trainer"])
def test_a_stack_converged_with_the_flat_layout_keeps_every_resource(stack, request, capsys):
    bed, program = request.getfixturevalue(stack)
    units = {r["urn"]: r for r in program if is_unit(r)}
    components = {r["name"] for r in program if not is_unit(r) and r["parent"] in {p["urn"] for p in program}}
    assert components, "the program has no components below its root"

    result = carry_over(bed, program)
    with capsys.disabled():
        print(f"\n{stack} {result.figure()}")

    flat = {e["name"]: e for e in result.before.values() if is_unit(e)}
    assert sorted(flat) == sorted(r["name"] for r in units.values())
    assert all(e["type"] == FLAT_UNIT_TYPE for e in flat.values())
    # The preview shows the new components only; every unit is the same resource.
    assert result.preview == {name: "create" for name in components}
    assert (result.count("create"), result.count("delete"), result.commands, result.scripts) == (0, 0, 0, 0), \
        [(op.name, op.operation) for op in result.ops]
    # Each unit read in the preview's refresh and in the update's (tests/engine `up`).
    assert result.count("read") == 2 * len(units)
    # Every unit's entry is under its new URN and type, with the id (the ownership record) of the flat one.
    after = {urn: e for urn, e in result.after.items() if is_unit(e)}
    assert sorted(after) == sorted(units)
    for urn, entry in after.items():
        assert entry["type"] == units[urn]["type"] and entry["parent"] == units[urn]["parent"], urn
        assert entry["id"] == flat[entry["name"]]["id"], urn
        assert set(entry["dependencies"]) <= set(result.after), urn
    assert bed.preview(program=program).changed() == {}
