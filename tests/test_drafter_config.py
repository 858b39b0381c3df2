"""DrafterConfig: target_layer_ids derived from the target's layer count, and a drafter's config.json checked against it."""

from __future__ import annotations

import pytest

from gpuhosts.plans.drafter_config import (
    check_drafter,
    derive_dflash_config,
    parse_drafter_config,
    target_layer_ids,
)
from test_compat_rules import QWEN36_DRAFTER_CONFIG


@pytest.mark.parametrize("target,draft,expected", [
    (64, 5, [1, 16, 31, 46, 61]),        # Qwen3.6-27B and its five-layer drafter
    (36, 5, [1, 9, 17, 25, 33]),         # Qwen3-4B, as z-lab/Qwen3-4B-DFlash-b16 was trained
    (64, 2, [1, 61]),
    (48, 1, [24]),
    (40, 3, [1, 19, 37]),
])
def test_evenly_spaced_from_1_to_n_minus_3(target, draft, expected):
    ids = target_layer_ids(target, draft)
    assert ids == expected
    assert ids == sorted(set(ids)) and ids[0] >= 1 and ids[-1] <= target - 3


@pytest.mark.parametrize("target,draft,words", [(3, 2, "too shallow"), (8, 7, "distinct target layers"), (64, 0, "at least one")])
def test_impossible_shapes_are_refused(target, draft, words):
    with pytest.raises(ValueError, match=words):
        target_layer_ids(target, draft)


def test_the_qwen36_drafter_config_agrees():
    facts = parse_drafter_config(QWEN36_DRAFTER_CONFIG)
    assert facts.num_layers == 5 and facts.has_sliding_window and facts.block_size == 16
    result = check_drafter(64, facts)
    assert result.ok and result.expected == (1, 16, 31, 46, 61)


def test_a_guessed_list_is_caught():
    """The list that gave about 1 % acceptance: plausible-looking, not what the drafter was trained on."""
    guessed = {**QWEN36_DRAFTER_CONFIG, "dflash_config": {"block_size": 16, "target_layer_ids": [3, 15, 27, 39, 51]}}
    result = check_drafter(64, parse_drafter_config(guessed))
    assert result.problems == ["its config.json dflash_config.target_layer_ids [3, 15, 27, 39, 51] differ from "
                               "[1, 16, 31, 46, 61], derived for a 64-layer target and 5 drafter layers"]


def test_a_drafter_for_another_target_is_caught():
    """A drafter trained for a 64-layer target on a 36-layer one: ids past the last layer."""
    result = check_drafter(36, parse_drafter_config(QWEN36_DRAFTER_CONFIG))
    assert result.problems == ["its config.json dflash_config.target_layer_ids [1, 16, 31, 46, 61] name layers outside "
                               "the target's 0..35"]


def test_declared_list_and_block_size_are_checked_too():
    facts = parse_drafter_config({**QWEN36_DRAFTER_CONFIG, "dflash_config": {"block_size": 8}})
    result = check_drafter(64, facts, declared=(1, 16, 31, 46, 60))
    assert [p.split(" [")[0] for p in result.problems] == ["the configured targetLayerIds",
                                                           "its block_size is 8, DFlash drafters are trained with 16"]


def test_layer_count_unknown_is_reported():
    assert not check_drafter(64, parse_drafter_config({})).ok


def test_dense_drafter_has_no_sliding_window():
    dense = {**QWEN36_DRAFTER_CONFIG, "layer_types": ["full_attention"] * 5}
    assert not parse_drafter_config(dense).has_sliding_window


def test_derived_dflash_config_block():
    assert derive_dflash_config(64, 5, mask_token_id=248070) == {
        "block_size": 16, "mask_token_id": 248070, "target_layer_ids": [1, 16, 31, 46, 61]}
