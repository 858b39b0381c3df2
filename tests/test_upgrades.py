"""`gpuhosts upgrades STACK` over the committed stacks: each newer release the compatibility data knows, tried by
changing only that version and validating the whole stack, with what else the bump changes."""

from __future__ import annotations

import pytest

from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.cli import main
from gpuhosts.upgrades import known_releases, upgrade_report


def report(values, secrets):
    bumps, unchanged = upgrade_report(values, set(secrets))
    return {(b.where.split(" ")[0] if b.where.startswith("services") else b.where, b.release): b for b in bumps}, \
        unchanged


def judged_as(bump, accepted: bool, words: list[str]) -> None:
    """The plan's verdict on a bump, and the words of what it changes (accepted) or why not (refused)."""
    assert bump.accepted is accepted
    text = "\n".join(bump.changes if accepted else bump.refusals)
    assert all(w in text for w in words), text


@pytest.mark.parametrize("where, release, accepted, words", [
    ("services[0]", "0.5.23", True, ["flag --mamba-scheduler-strategy → --mamba-radix-cache-strategy"]),
    ("services[1]", "0.33.0", True, []),
    ("services[1]", "0.34.0", False, ["pins flashinfer-python==0.7.3"]),
])
def test_kpro5s_engines(where, release, accepted, words):
    bumps, unchanged = report(kpro5_values(), KPRO5_SECRETS)
    judged_as(bumps[(where, release)], accepted, words)
    assert any(line.startswith("nvidia.version: driver 580.126.09") for line in unchanged)


@pytest.mark.parametrize("where, release, accepted, words", [
    ("training.speculators.version", "0.9.0", True,
     ["data step: scripts/prepare_data.py → `speculators prepare-data`",
      "trainer default loss_fn: kl_div → ce; the stack renders hyper.lossFn, so training does not change",
      "trainer default max_anchors: 3072 → 512", "trainer setting noise_std (0.05 in 0.7.0) is gone"]),
    ("training.speculators.version", "0.8.1", False, ["no lock for speculators==0.8.1"]),
    ("training.vllm.version", "0.33.0", True, []),
])
def test_the_trainers_releases(where, release, accepted, words):
    bumps, _ = report(trainer_values(), TRAINER_SECRETS)
    judged_as(bumps[(where, release)], accepted, words)


def test_known_releases_come_from_the_locks_the_newest_row_the_commits_and_the_rules():
    assert known_releases("vllm") == ["0.26.0", "0.33.0", "0.34.0"]
    assert known_releases("speculators") == ["0.7.0", "0.7.0.1", "0.8.1", "0.9.0"]


def test_the_command_prints_each_bump_and_the_way_to_review_it(capsys):
    assert main(["upgrades", "kpro5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("upgrades of stack kpro5: 3 known newer release(s), 2 accepted by the plan")
    assert "sglang 0.5.11 → 0.5.23: accepted" in out and "vllm 0.26.0 → 0.34.0: refused" in out
    assert "gpuhosts diff kpro5 --base main" in out


def test_an_unknown_stack_is_an_error_not_a_traceback(capsys):
    assert main(["upgrades", "nosuch"]) == 1
    assert "does not exist" in capsys.readouterr().err
