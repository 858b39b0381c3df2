"""The small verifier, its tokenizer, the z-lab-shaped drafter and the mix rows the GPU run of the trainer trains on.

    python tests/gpu/trainer_models.py --bundle build/gpu-trainer [--root /]

Run with the Python of the speculators environment (transformers and tokenizers of that release, so the files are
what it writes). Each model keeps the layer kinds and the layer count of the real one and scales the widths:

* The verifier is Qwen/Qwen3.6-27B's shape (`Qwen3_5ForConditionalGeneration`, model_type qwen3_5: a text config
  qwen3_5_text of 64 layers, three Gated DeltaNet `linear_attention` layers then one `full_attention`, and a vision
  tower), random weights, saved with save_pretrained. 64 layers keep every layer id of the plan as the trainer
  stack renders it ([2, 17, 32, 47, 62] and the last layer, 64).
* Its tokenizer is a byte-level BPE trained here on the run's own text (tokenizers), saved as a
  PreTrainedTokenizerFast with Qwen's special tokens and a ChatML chat template in Qwen's manner, strict about the
  system turn coming first as Qwen3.6's is.
* The drafter is z-lab/Qwen3.6-27B-DFlash's config.json with the widths scaled (its keys as public copies of that
  file give them: DFlashDraftModel, model_type qwen3, 5 layers [S, S, S, S, F], `dflash_config` with
  `mask_token_id` and `target_layer_ids` [1, 16, 31, 46, 61], `block_size` 16, `num_target_layers` 64), and a
  model.safetensors with the tensors of z-lab's draft body (`layers.N.*`, `fc`, `hidden_norm`, `norm`: the names
  speculators' DFlash converter copies as they are, src/speculators/convert/dflash/converter.py v0.7.0).
* The mix file is ShareGPT rows (`conversations` of `from`/`value`), as dataset-prepare.py's mix writes them,
  counted per source as the scaled stack declares.

Each directory gets the `.gpuhosts-download` marker the downloads leave, so the units that need one find it.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

# Widths of the stand-ins (the real ones: hidden 5120, 24 attention heads of 256, vocabulary 248320).
HIDDEN = 128
INTERMEDIATE = 256
HEAD_DIM = 32
VOCAB = 1280
TOKENIZER_VOCAB = 1000
# The real mask token lies 250 below the end of the vocabulary (248070 of 248320), past the text tokens.
MASK_TOKEN_ID = VOCAB - 250
SLIDING_WINDOW = 128
SEED = 20260601
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# ChatML as Qwen writes it; a system turn anywhere but first is refused, as Qwen3.6's template refuses it. A
# turn's content is text or, through a processor (Qwen3VLProcessor hands the template typed parts), a list of
# {"type": "text", "text": ...} parts, which Qwen3.6's template also takes.
CHAT_TEMPLATE = (
    "{%- macro text(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- else -%}{%- for part in content -%}{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' and not loop.first -%}"
    "{{- raise_exception('System message must be at the beginning.') -}}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + text(message['content']) + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

WORDS = ("the drafter reads hidden states of five target layers and proposes a block of sixteen tokens while the "
         "verifier checks them in one pass sliding window attention keeps four layers local and the last layer "
         "sees the whole context gated delta rule layers carry a recurrent state tokens code python function "
         "return value list loop index error file path server request response train step loss accuracy epoch "
         "checkpoint gradient learning rate batch sequence length mask token speculative decoding acceptance").split()


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


def conversation(rng: random.Random, system: bool) -> list[dict]:
    turns = [{"from": "system", "value": sentence(rng, 4, 10)}] if system else []
    for _ in range(rng.randint(1, 2)):
        turns.append({"from": "human", "value": sentence(rng, 6, 20)})
        turns.append({"from": "gpt", "value": " ".join(sentence(rng, 8, 24) for _ in range(rng.randint(1, 4)))})
    return turns


def write_mix(mix_file: Path, sources: list[dict]) -> int:
    rng = random.Random(SEED)
    rows = []
    for source in sources:
        for _ in range(source["count"]):
            rows.append({"conversations": conversation(rng, system=rng.random() < 0.3), "source": source["source"]})
    mix_file.parent.mkdir(parents=True, exist_ok=True)
    mix_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return len(rows)


def build_tokenizer(directory: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(SEED)
    corpus = [sentence(rng, 5, 30) for _ in range(4000)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB - len(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus, trainer)
    tokenizer.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(directory)
    return fast


def build_processor(directory: Path, tokenizer) -> None:
    """Qwen3.6-27B's processor (Qwen3VLProcessor: its image and video processors with the tokenizer), as
    AutoProcessor finds it beside a qwen3_5 config; prepare_data.py loads the verifier through it."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    sizes = dict(patch_size=16, merge_size=2, temporal_patch_size=2)
    Qwen3VLProcessor(image_processor=Qwen2VLImageProcessorPil(**sizes), tokenizer=tokenizer,
                     video_processor=Qwen3VLVideoProcessor(**sizes),
                     chat_template=tokenizer.chat_template).save_pretrained(directory)


def build_verifier(directory: Path, num_layers: int, eos_token_id: int, text_only: bool) -> dict:
    from transformers import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5TextConfig

    layer_types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(num_layers)]
    text = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=num_layers,
                num_attention_heads=4, num_key_value_heads=1, head_dim=HEAD_DIM, linear_num_key_heads=2,
                linear_num_value_heads=4, linear_key_head_dim=HEAD_DIM, linear_value_head_dim=HEAD_DIM,
                linear_conv_kernel_dim=4, layer_types=layer_types, full_attention_interval=4,
                max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [2, 1, 1], "mrope_interleaved": True},
                eos_token_id=eos_token_id)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=HIDDEN,
                  num_position_embeddings=16)
    torch.manual_seed(SEED)
    if text_only:
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text)).to(torch.bfloat16)
    else:
        config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False)
        model = Qwen3_5ForConditionalGeneration(config).to(torch.bfloat16)
    model.save_pretrained(directory)
    return json.loads((directory / "config.json").read_text())


def zlab_config(num_target_layers: int, target_layer_ids: list[int]) -> dict:
    """z-lab/Qwen3.6-27B-DFlash's config.json, widths scaled."""
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3",
        "dtype": "bfloat16",
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": 5,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HEAD_DIM,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
        "use_sliding_window": True,
        "sliding_window": SLIDING_WINDOW,
        "max_window_layers": 5,
        "vocab_size": VOCAB,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000000,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "num_target_layers": num_target_layers,
        "block_size": 16,
        "dflash_config": {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": target_layer_ids},
    }


def zlab_weights(config: dict) -> dict[str, torch.Tensor]:
    """The draft body's tensors by z-lab's names: Qwen3 decoder layers, `fc` from the concatenated target states
    to the hidden size, `hidden_norm` after it, `norm` at the end."""
    hidden, inter, heads, kv, head = (config["hidden_size"], config["intermediate_size"],
                                     config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"])
    generator = torch.Generator().manual_seed(SEED)

    def weight(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    tensors = {"fc.weight": weight(hidden, hidden * len(config["dflash_config"]["target_layer_ids"])),
               "hidden_norm.weight": torch.ones(hidden, dtype=torch.bfloat16),
               "norm.weight": torch.ones(hidden, dtype=torch.bfloat16)}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": weight(heads * head, hidden),
            p + "self_attn.k_proj.weight": weight(kv * head, hidden),
            p + "self_attn.v_proj.weight": weight(kv * head, hidden),
            p + "self_attn.o_proj.weight": weight(hidden, heads * head),
            p + "self_attn.q_norm.weight": torch.ones(head, dtype=torch.bfloat16),
            p + "self_attn.k_norm.weight": torch.ones(head, dtype=torch.bfloat16),
            p + "mlp.gate_proj.weight": weight(inter, hidden),
            p + "mlp.up_proj.weight": weight(inter, hidden),
            p + "mlp.down_proj.weight": weight(hidden, inter),
            p + "input_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
        })
    return tensors


def main() -> int:
    from safetensors.torch import save_file

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--root", type=Path, default=Path("/"), help="where the node's paths begin (default /)")
    parser.add_argument("--text-only", action="store_true",
                        help="the verifier's text model alone (qwen3_5_text, no processor): for an environment "
                             "without torchvision, whose video processor Qwen3VLProcessor needs")
    args = parser.parse_args()
    bundle = json.loads((args.bundle / "bundle.json").read_text())

    def node(path: str) -> Path:
        return args.root / path.lstrip("/")

    verifier = node(bundle["verifier"])
    verifier.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(verifier)
    config = build_verifier(verifier, bundle["verifierLayers"], tokenizer.convert_tokens_to_ids("<|im_end|>"),
                            args.text_only)
    if not args.text_only:
        build_processor(verifier, tokenizer)
    (verifier / ".gpuhosts-download").write_text("stand-in verifier\n")

    drafter = node(bundle["drafter"])
    drafter.mkdir(parents=True, exist_ok=True)
    zlab = zlab_config(bundle["verifierLayers"], bundle["drafterChecks"]["targetLayerIds"])
    (drafter / "config.json").write_text(json.dumps(zlab, indent=2) + "\n")
    save_file(zlab_weights(zlab), str(drafter / "model.safetensors"), metadata={"format": "pt"})
    (drafter / ".gpuhosts-download").write_text("stand-in drafter\n")

    mix = next(call for call in bundle["tokenize"] if "--max-samples" not in call["argv"])["argv"]
    rows = write_mix(node(mix[mix.index("--data") + 1]), bundle["dataset"]["mix"])
    print(json.dumps({"verifier": str(verifier), "modelType": config["model_type"],
                      "layers": len(config.get("text_config", config)["layer_types"]),
                      "tokenizer": len(tokenizer), "drafter": str(drafter), "mixRows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
