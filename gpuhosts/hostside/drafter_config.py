"""DrafterConfig: the DFlash drafter's `dflash_config` derived from its target, and checked against the drafter's own.

A DFlash drafter conditions on the hidden states of a few target layers, fixed when it was trained. The list is
derived, never guessed: ids evenly spaced from layer 1 to layer N-3 of the target's N layers (Qwen3.6-27B: N = 64,
five ids → [1, 16, 31, 46, 61]). A drafter's config.json, when at hand, must agree.

The training node also runs this file verbatim (templates/drafter_convert/check-drafter-config.py.j2, standard
library only): after the download it compares the drafter's config.json — its mask token, layer types and sliding
window, which the stack may omit and then takes from it — with what the stack declares, and after the conversion
the speculators checkpoint's config with the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FIRST_LAYER = 1
LAST_FROM_END = 3
BLOCK_SIZE = 16


def target_layer_ids(num_target_layers: int, num_ids: int) -> list[int]:
    """`num_ids` target layer ids evenly spaced from layer 1 to N - 3, as z-lab computes them
    (z-lab/dflash dflash/model.py build_target_layer_ids): `int(round(1 + i * span / (num_ids - 1)))`, so halves
    round to the even neighbour (Python's round), and a single id is the middle layer N // 2.

    `num_ids` is how many ids the drafter conditions on — by default its layer count, but a drafter's
    `dflash_config.target_layer_ids` may hold another number, and then that number counts."""
    if num_ids < 1:
        raise ValueError("a drafter conditions on at least one target layer")
    if num_ids == 1:
        return [num_target_layers // 2]
    start, end = FIRST_LAYER, num_target_layers - LAST_FROM_END
    if end < start:
        raise ValueError(f"a target of {num_target_layers} layers is too shallow for a DFlash drafter")
    span = end - start
    return [int(round(start + (i * span) / (num_ids - 1))) for i in range(num_ids)]


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
    """Read a DFlash drafter's config.json (as a dict): z-lab's layout, or a speculators checkpoint's."""
    if "speculators_model_type" in config:
        # speculators' DFlashSpeculatorConfig (src/speculators/convert/dflash/converter.py DFlashConverter._build_config,
        # v0.7.0.1): the decoder under transformer_layer_config, the target ids as aux_hidden_state_layer_ids, which
        # are z-lab's + 1 (hidden state 0 is the embedding output).
        layer = config.get("transformer_layer_config") or {}
        aux = config.get("aux_hidden_state_layer_ids")
        return DrafterFacts(
            num_layers=layer.get("num_hidden_layers"),
            target_layer_ids=tuple(int(i) - 1 for i in aux) if aux is not None else None,
            block_size=config.get("block_size"),
            mask_token_id=config.get("mask_token_id"),
            layer_types=tuple(layer.get("layer_types") or ()),
            sliding_window=layer.get("sliding_window") if layer.get("use_sliding_window", True) else None,
        )
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
    # How many ids: what the drafter's own list holds (z-lab's fc layer takes len(target_layer_ids) hidden states,
    # which need not be its layer count), else its layer count.
    count = len(facts.target_layer_ids or declared or ()) or layers
    expected = tuple(target_layer_ids(num_target_layers, count))
    problems = []
    for origin, ids in (("its config.json dflash_config.target_layer_ids", facts.target_layer_ids),
                        ("the configured targetLayerIds", declared)):
        if ids is None:
            continue
        derived = tuple(target_layer_ids(num_target_layers, len(ids))) if ids else expected
        if any(i < 0 or i >= num_target_layers for i in ids):
            problems.append(f"{origin} {list(ids)} name layers outside the target's 0..{num_target_layers - 1}")
        elif tuple(ids) != derived:
            problems.append(f"{origin} {list(ids)} differ from {list(derived)}, derived for a {num_target_layers}-layer "
                            f"target and {len(ids)} ids")
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


# --- the stack's declared drafter values against a config.json ----------------------------------------------

# stack field (under gpuhosts:training.hyper) → (the config.json key it is read from, DrafterFacts attribute)
DECLARED_FIELDS = {
    "maskTokenId": ("dflash_config.mask_token_id", "mask_token_id"),
    "layerTypes": ("layer_types", "layer_types"),
    "slidingWindow": ("sliding_window", "sliding_window"),
    "numLayers": ("num_hidden_layers", "num_layers"),
    "blockSize": ("dflash_config.block_size", "block_size"),
}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def compare_declared(facts: DrafterFacts, declared: dict[str, Any], *, origin: str = "the drafter's config.json"
                     ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(the values to train with, [(field, problem)]): each declared value must equal the config's; a value the
    stack leaves out (None or absent) is taken from the config, which must then have it."""
    values: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for name, (key, attribute) in DECLARED_FIELDS.items():
        found = _plain(getattr(facts, attribute))
        found = None if found == [] else found
        want = _plain(declared.get(name))
        if want is None:
            if found is None and name in ("maskTokenId", "layerTypes"):
                problems.append((f"hyper.{name}", f"is not set and {origin} has no {key}; set hyper.{name}"))
            values[name] = found
        elif found is not None and found != want:
            problems.append((f"hyper.{name}", f"hyper.{name} {want} differs from {origin}'s {key} {found}; remove "
                                   f"hyper.{name} to take it from the drafter, or use the drafter it was meant for"))
            values[name] = found
        else:
            values[name] = want
    sliding = "sliding_attention" in (values.get("layerTypes") or [])
    if sliding and values.get("slidingWindow") is None:
        problems.append(("hyper.slidingWindow", f"the drafter has sliding-window layers and {origin} names no "
                                          "sliding_window; set hyper.slidingWindow"))
    return values, problems


def main(argv: list[str]) -> int:
    """On the node: `check-drafter-config.py CONFIG_JSON DECLARED_JSON [WHAT]` — print the values to train with,
    or every disagreement (naming the stack field), and exit 1."""
    import json
    import sys

    config_path, declared_text = argv[0], argv[1]
    what = argv[2] if len(argv) > 2 else config_path
    try:
        with open(config_path) as handle:
            config = json.load(handle)
    except (OSError, ValueError) as error:
        print(f"drafter config: cannot read {config_path}: {error}", file=sys.stderr)
        return 2
    declared = json.loads(declared_text)
    facts = parse_drafter_config(config)
    values, problems = compare_declared(facts, declared, origin=what)
    expected_ids = declared.get("targetLayerIds")
    if expected_ids is not None and facts.target_layer_ids is not None and list(facts.target_layer_ids) != expected_ids:
        problems.append(("drafter.targetLayerIds", f"{what}'s target layer ids {list(facts.target_layer_ids)} differ from "
                                           f"{expected_ids}, which the server extracts and the trainer is given"))
    for name, problem in problems:
        print(f"drafter config: gpuhosts:training.{name}: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("drafter config: " + json.dumps(values, sort_keys=True))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
