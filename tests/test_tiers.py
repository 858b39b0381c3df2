"""The test tiers: every entry of the tier tables names a module or test that exists, so a rename cannot move a suite
into `make test` unseen."""

from __future__ import annotations

import ast

import pytest

from conftest import FULL_TIER, QUICK_IN_FULL_MODULE, TESTS


def defined_tests(module: str) -> set[str]:
    tree = ast.parse((TESTS / module).read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


@pytest.mark.parametrize("entry", sorted(FULL_TIER) + sorted(QUICK_IN_FULL_MODULE))
def test_each_full_tier_entry_names_a_module_or_test_that_exists(entry):
    module, _, test = entry.partition("::")
    assert (TESTS / module).is_file(), f"the tier table names {module}, which is not in tests/"
    if test:
        assert test in defined_tests(module), f"the tier table names {entry}, which {module} does not define"


def test_the_quick_tier_keeps_a_converge_of_every_module_it_thins():
    """A module thinned test by test keeps at least one test in `make test`."""
    thinned = {entry.partition("::")[0] for entry in FULL_TIER if "::" in entry}
    for module in thinned:
        kept = defined_tests(module) - {entry.partition("::")[2] for entry in FULL_TIER if entry.startswith(module + "::")}
        assert kept, f"every test of {module} is in the full tier: name the module instead"
