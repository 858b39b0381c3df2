"""DrafterConfig: target_layer_ids derived from the target's layer count, and a drafter's config.json checked against it."""

from __future__ import annotations

import pytest

from gpuhosts.hostside.drafter_config import (
    check_drafter,
    compare_declared,
    derive_dflash_config,
    parse_drafter_config,
    target_layer_ids,
)
from model_configs import QWEN36_DRAFTER_CONFIG


# z-lab/dflash dflash/model.py build_target_layer_ids: int(round(1 + i * (N - 4) / (k - 1))) for k ids; Python's
# round sends halves to the even neighbour, which "half up" gets wrong in the rows marked .5.
@pytest.mark.parametrize("target,ids,expected", [
    (64, 5, [1, 16, 31, 46, 61]),        # Qwen3.6-27B and its five-layer drafter
    (36, 5, [1, 9, 17, 25, 33]),         # Qwen3-4B, as z-lab/Qwen3-4B-DFlash-b16 was trained
    (64, 2, [1, 61]),
    (48, 1, [24]),                       # one id: the middle layer
    (40, 3, [1, 19, 37]),
    (11, 3, [1, 4, 8]),                  # .5: 4.5 → 4 (half up would say 5)
    (15, 3, [1, 6, 12]),                 # .5: 6.5 → 6 (half up: 7)
    (30, 5, [1, 8, 14, 20, 27]),         # .5 twice: 7.5 → 8, 20.5 → 20 (half up: 21)
    (8, 7, [1, 2, 2, 3, 4, 4, 5]),       # more ids than layers between 1 and N-3: z-lab repeats layers
])
def test_z_lab_build_target_layer_ids(target, ids, expected):
    assert target_layer_ids(target, ids) == expected


@pytest.mark.parametrize("config, layers, expected, problems", [
    # five layers, five ids: the usual drafter
    ({"num_hidden_layers": 5, "dflash_config": {"target_layer_ids": [1, 16, 31, 46, 61]}}, 5, (1, 16, 31, 46, 61), 0),
    # five layers conditioning on three ids: the ids are derived for three, not five
    ({"num_hidden_layers": 5, "dflash_config": {"target_layer_ids": [1, 31, 61]}}, 5, (1, 31, 61), 0),
    # eight layers, five ids
    ({"num_hidden_layers": 8, "dflash_config": {"target_layer_ids": [1, 16, 31, 46, 61]}}, 8, (1, 16, 31, 46, 61), 0),
    # three ids that are not z-lab's spacing
    ({"num_hidden_layers": 5, "dflash_config": {"target_layer_ids": [1, 30, 61]}}, 5, (1, 30, 61), 1),
])
def test_the_count_of_ids_is_the_drafters_own(config, layers, expected, problems):
    result = check_drafter(64, parse_drafter_config(config))
    assert len(result.problems) == problems
    if not problems:
        assert result.expected == expected


@pytest.mark.parametrize("target,ids,words", [(3, 2, "too shallow"), (64, 0, "at least one")])
def test_impossible_shapes_are_refused(target, ids, words):
    with pytest.raises(ValueError, match=words):
        target_layer_ids(target, ids)


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
                               "[1, 16, 31, 46, 61], derived for a 64-layer target and 5 ids"]


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


SPECULATORS_CONVERTED = {
    # what speculators' DFlashConverter._build_config (v0.7.0 src/speculators/convert/dflash/converter.py) makes of
    # QWEN36_DRAFTER_CONFIG: the decoder keys under transformer_layer_config, ids + 1
    "speculators_model_type": "dflash", "block_size": 16, "mask_token_id": 248070,
    "aux_hidden_state_layer_ids": [2, 17, 32, 47, 62],
    "transformer_layer_config": {"num_hidden_layers": 5, "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
                                 "sliding_window": 2048, "use_sliding_window": True},
}


def test_a_converted_checkpoint_reads_as_the_drafter_it_came_from():
    assert parse_drafter_config(SPECULATORS_CONVERTED) == parse_drafter_config(QWEN36_DRAFTER_CONFIG)


S, F = "sliding_attention", "full_attention"


@pytest.mark.parametrize("declared, values, problems", [
    # the stack leaves them out: all three come from config.json
    ({}, {"maskTokenId": 248070, "layerTypes": [S, S, S, S, F], "slidingWindow": 2048}, []),
    # the stack agrees
    ({"maskTokenId": 248070, "layerTypes": [S, S, S, S, F], "slidingWindow": 2048}, {"maskTokenId": 248070}, []),
    # the pasted first unused id
    ({"maskTokenId": 248077}, {"maskTokenId": 248070}, ["hyper.maskTokenId"]),
    # every layer sliding, as speculators >= 0.7 makes a fresh drafter without --full-attention-indices
    ({"layerTypes": [S] * 5}, {"layerTypes": [S, S, S, S, F]}, ["hyper.layerTypes"]),
    ({"slidingWindow": 4096, "numLayers": 6}, {"slidingWindow": 2048}, ["hyper.slidingWindow", "hyper.numLayers"]),
])
def test_declared_values_are_checked_against_config_json(declared, values, problems):
    for config in (QWEN36_DRAFTER_CONFIG, SPECULATORS_CONVERTED):
        found, wrong = compare_declared(parse_drafter_config(config), declared)
        assert [name for name, _ in wrong] == problems
        assert {k: found[k] for k in values} == values
        for name, message in wrong:
            assert message.startswith(f"{name} ") and "differs from the drafter's config.json" in message


def test_a_config_without_a_mask_token_needs_one_declared():
    bare = {k: v for k, v in QWEN36_DRAFTER_CONFIG.items() if k != "dflash_config"}
    _, wrong = compare_declared(parse_drafter_config(bare), {})
    assert wrong == [("hyper.maskTokenId", "is not set and the drafter's config.json has no "
                                           "dflash_config.mask_token_id; set hyper.maskTokenId")]
    assert compare_declared(parse_drafter_config(bare), {"maskTokenId": 248070})[1] == []
