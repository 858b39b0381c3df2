"""Models' config.json as their Hub repositories serve them, for the checks that read a drafter's config.
"""

from __future__ import annotations



QWEN36_DRAFTER_CONFIG = {
    "architectures": ["DFlashDraftModel"],
    "num_hidden_layers": 5,
    "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
    "sliding_window": 2048,
    "dflash_config": {"block_size": 16, "mask_token_id": 248070, "target_layer_ids": [1, 16, 31, 46, 61]},
}
