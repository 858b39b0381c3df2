"""DrafterConfig: the DFlash drafter's `dflash_config` derived from its target, and checked against the drafter's own.

A DFlash drafter conditions on the hidden states of a few target layers, fixed when it was trained. The list is
derived, never guessed: `num_draft_layers` ids evenly spaced from layer 1 to layer N-3 of the target's N layers
(Qwen3.6-27B: N = 64, five drafter layers → [1, 16, 31, 46, 61]). A drafter's config.json, when at hand, must agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FIRST_LAYER = 1
LAST_FROM_END = 3
BLOCK_SIZE = 16


def target_layer_ids(num_target_layers: int, num_draft_layers: int, *, first: int = FIRST_LAYER,
                     last_from_end: int = LAST_FROM_END) -> list[int]:
    """`num_draft_layers` target layer ids evenly spaced from `first` to N - `last_from_end`, rounded to the nearest."""
    last = num_target_layers - last_from_end
    if num_draft_layers < 1:
        raise ValueError("a drafter has at least one layer")
    if last < first:
        raise ValueError(f"a target of {num_target_layers} layers is too shallow for a DFlash drafter")
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    span = last - first
    if num_draft_layers > span + 1:
        raise ValueError(f"{num_draft_layers} drafter layers need {num_draft_layers} distinct target layers; "
                         f"layers {first}..{last} offer {span + 1}")
    # Integer arithmetic (round half up) so the result never depends on float rounding.
    return [first + (i * span * 2 + (num_draft_layers - 1)) // (2 * (num_draft_layers - 1)) for i in range(num_draft_layers)]


@dataclass(frozen=True)
class DrafterFacts:
    """What a drafter's config.json says about how it was trained."""

    num_layers: int | None
    target_layer_ids: tuple[int, ...] | None
    block_size: int | None
    mask_token_id: int | None
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None

    @property
    def has_sliding_window(self) -> bool:
        return "sliding_attention" in self.layer_types or (not self.layer_types and bool(self.sliding_window))


def parse_drafter_config(config: dict[str, Any]) -> DrafterFacts:
    """Read a DFlash drafter's config.json (as a dict)."""
    dflash = config.get("dflash_config") or {}
    ids = dflash.get("target_layer_ids", config.get("target_layer_ids"))
    return DrafterFacts(
        num_layers=config.get("num_hidden_layers"),
        target_layer_ids=tuple(int(i) for i in ids) if ids is not None else None,
        block_size=dflash.get("block_size", config.get("block_size")),
        mask_token_id=dflash.get("mask_token_id", config.get("mask_token_id")),
        layer_types=tuple(config.get("layer_types") or ()),
        sliding_window=config.get("sliding_window") if config.get("use_sliding_window", True) else None,
    )


@dataclass(frozen=True)
class DrafterCheck:
    expected: tuple[int, ...]
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_drafter(num_target_layers: int, facts: DrafterFacts, *, declared: tuple[int, ...] | None = None,
                  num_draft_layers: int | None = None) -> DrafterCheck:
    """Compare the drafter's own config (and a declared list) with the list derived from the target."""
    layers = facts.num_layers or num_draft_layers or (len(facts.target_layer_ids) if facts.target_layer_ids else None)
    if layers is None:
        return DrafterCheck(expected=(), problems=["the drafter's layer count is unknown: its config.json has no "
                                                   "num_hidden_layers and none is configured"])
    expected = tuple(target_layer_ids(num_target_layers, layers))
    problems = []
    for origin, ids in (("its config.json dflash_config.target_layer_ids", facts.target_layer_ids),
                        ("the configured targetLayerIds", declared)):
        if ids is None:
            continue
        if any(i < 0 or i >= num_target_layers for i in ids):
            problems.append(f"{origin} {list(ids)} name layers outside the target's 0..{num_target_layers - 1}")
        elif tuple(ids) != expected:
            problems.append(f"{origin} {list(ids)} differ from {list(expected)}, derived for a {num_target_layers}-layer "
                            f"target and {layers} drafter layers")
    if facts.block_size is not None and facts.block_size != BLOCK_SIZE:
        problems.append(f"its block_size is {facts.block_size}, DFlash drafters are trained with {BLOCK_SIZE}")
    return DrafterCheck(expected=expected, problems=problems)


def derive_dflash_config(num_target_layers: int, num_draft_layers: int, mask_token_id: int) -> dict[str, Any]:
    """The `dflash_config` block a drafter for this target carries (for training, and for checking one)."""
    return {
        "block_size": BLOCK_SIZE,
        "mask_token_id": mask_token_id,
        "target_layer_ids": target_layer_ids(num_target_layers, num_draft_layers),
    }
