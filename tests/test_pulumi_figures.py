"""The real-engine tier's figures hold their own goals: `make test-pulumi` fails when one is missed."""

from __future__ import annotations

import pytest

from realengine.figures import misses

GOOD = {"kpro5": {"host_restored": "yes"}, "drift": {"cases": 28, "shown": 28, "clean": 28},
        "faults-interrupted": {"interrupted_up": "converged"}, "faults-target": {"target": "only_service"}}

CASES = [
    ("every goal met", {}, []),
    ("a host left changed", {"kpro5": {"host_restored": "no"}}, ["kpro5: host_restored=no"]),
    ("a drift not shown", {"drift": {"cases": 28, "shown": 27, "clean": 27}},
     ["drift: cases=28 shown=27 clean=27"]),
    ("a target that ran more", {"faults-target": {"target": "more"}}, ["faults-target: target=more, not only_service"]),
]


@pytest.mark.parametrize("case,change,missed", CASES, ids=[c[0] for c in CASES])
def test_a_missed_goal_is_named(case, change, missed):
    assert misses({**GOOD, **change}) == missed
