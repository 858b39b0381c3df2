"""Verify-step latency of DDTree's tree verify and DFlash's block verify on a GDN-hybrid target at Qwen3.6-27B's
dimensions (random weights, bf16), against one decode step; run on a GPU inside a patched DDTree checkout.

Dimensions from the Qwen/Qwen3.6-27B model card: hidden 5120, 64 layers as 16 x (3 Gated DeltaNet + 1 gated
attention), Gated DeltaNet 48 V / 16 QK heads of 128 with conv kernel 4, attention 24 Q / 4 KV heads of 256,
FFN 17408, vocabulary 248320, partial rotary 0.25. `--layers` below 64 keeps the pattern (a multiple of 4) and the
figures scale with it. Prints one line `VERIFY_MS {json}`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch


def config(layers: int, rehearsal: bool):
    from transformers import Qwen3_5TextConfig

    if rehearsal:  # a CPU rehearsal of the script, not a figure
        return Qwen3_5TextConfig(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
            layer_types=["linear_attention"] * 3 + ["full_attention"], num_attention_heads=4,
            num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=16)
    return Qwen3_5TextConfig(
        vocab_size=248320, hidden_size=5120, intermediate_size=17408, num_hidden_layers=layers,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"] * (layers // 4),
        num_attention_heads=24, num_key_value_heads=4, head_dim=256, linear_num_key_heads=16,
        linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        max_position_embeddings=262144, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
    )


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, repeats: int) -> list[float]:
    for _ in range(5):
        fn()
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--prefix", type=int, default=512)
    parser.add_argument("--budgets", default="16,64,256")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rehearsal", action="store_true", help="tiny dimensions on CPU, to try the script")
    args = parser.parse_args()
    sys.path.insert(0, ".")
    from transformers import Qwen3_5ForCausalLM
    from ddtree import build_ddtree_tree
    from model.gdn_tree import crop_attention, linear_attention_verify, new_target_cache

    device = torch.device("cpu" if args.rehearsal else "cuda")
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(device):
        target = Qwen3_5ForCausalLM._from_config(config(args.layers, args.rehearsal), dtype=torch.bfloat16,
                                                 attn_implementation="sdpa").eval()
    build_s = time.perf_counter() - t0
    weights_gb = sum(p.numel() * p.element_size() for p in target.parameters()) / 1e9
    vocab = target.config.vocab_size
    verifier = linear_attention_verify(target)
    cache = new_target_cache(target)
    prefix = torch.randint(0, vocab, (1, args.prefix), device=device)
    with torch.inference_mode():
        target(prefix, position_ids=torch.arange(args.prefix, device=device)[None], past_key_values=cache,
               use_cache=True, logits_to_keep=1)
    start = args.prefix
    figures: dict[str, dict] = {}

    def forward(ids, positions, mask=None):
        return target(ids, position_ids=positions, attention_mask=mask, past_key_values=cache, use_cache=True,
                      output_hidden_states=True)

    def measure(name, ids, positions, mask, visibility, accepted):
        def step():
            with torch.inference_mode():
                if visibility is None:
                    forward(ids, positions, mask)
                else:
                    with verifier.verify(visibility):
                        forward(ids, positions, mask)
                crop_attention(cache, start)

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        samples = timed(step, args.repeats)
        figures[name] = {"ms_median": statistics.median(samples), "ms_min": min(samples), "nodes": ids.shape[1],
                         "peak_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None}

    # One decode step: the target's own single-token path.
    token = torch.randint(0, vocab, (1, 1), device=device)
    measure("decode", token, torch.tensor([[start]], device=device), None, None, None)

    # DFlash: one block verified as a chain, and the commit of a path through it.
    block = torch.randint(0, vocab, (1, args.block_size), device=device)
    chain = torch.ones((args.block_size, args.block_size), dtype=torch.bool).tril()
    measure("dflash_block", block, torch.arange(start, start + args.block_size, device=device)[None], None, chain,
            None)

    def commit_ms(nodes_visibility, ids, positions, mask, accepted):
        def step():
            with torch.inference_mode():
                with verifier.verify(nodes_visibility):
                    forward(ids, positions, mask)
                saved = [(layer.conv_states[0].clone(), layer.recurrent_states[0].clone())
                         for layer in cache.layers if hasattr(layer, "recurrent_states")]
                sync()
                t = time.perf_counter()
                verifier.commit(cache, accepted)
                sync()
                step.ms.append((time.perf_counter() - t) * 1000)
                for layer, (conv, rec) in zip([l for l in cache.layers if hasattr(l, "recurrent_states")], saved):
                    layer.conv_states[0].copy_(conv)
                    layer.recurrent_states[0].copy_(rec)
                crop_attention(cache, start)
        step.ms = []
        for _ in range(3):
            step()
        return statistics.median(step.ms[1:])

    figures["dflash_block"]["commit_ms"] = commit_ms(
        chain, block, torch.arange(start, start + args.block_size, device=device)[None], None,
        list(range(args.block_size // 2)))

    # DDTree: trees of each budget, built by ddtree.py from peaked random draft logits, verified with the tree mask.
    generator = torch.Generator().manual_seed(0)
    for budget in [int(b) for b in args.budgets.split(",")]:
        draft_logits = torch.randn((args.block_size - 1, min(vocab, 4096)), generator=generator) * 4
        node_ids, depths, parents, _children, visibility, _ = build_ddtree_tree(draft_logits, budget)
        n = 1 + node_ids.numel()
        ids = torch.cat([torch.randint(0, vocab, (1,)), node_ids]).view(1, n).to(device)
        positions = (torch.cat([torch.zeros(1, dtype=torch.long), depths]) + start).view(1, n).to(device)
        mask = torch.full((1, 1, n, start + n), torch.finfo(torch.bfloat16).min, dtype=torch.bfloat16)
        mask[0, 0, :, :start] = 0
        mask[0, 0, :, start:].masked_fill_(visibility, 0)
        mask = mask.to(device)
        measure(f"budget_{budget}", ids, positions, mask, visibility, None)
        deepest = max(range(n), key=lambda i: int(visibility[i].sum()))
        path = [int(i) for i in torch.nonzero(visibility[deepest]).flatten()]
        figures[f"budget_{budget}"]["commit_ms"] = commit_ms(visibility, ids, positions, mask, path)
        figures[f"budget_{budget}"]["depth"] = int(depths.max())
        # The same tree through transformers' own Gated DeltaNet path (the states it leaves are wrong; its cost
        # is what the tree-aware path is measured against).
        saved = [(layer.conv_states[0].clone(), layer.recurrent_states[0].clone())
                 for layer in cache.layers if hasattr(layer, "recurrent_states")]
        def native():
            with torch.inference_mode():
                forward(ids, positions, mask)
                for layer, (conv, rec) in zip([l for l in cache.layers if hasattr(l, "recurrent_states")], saved):
                    layer.conv_states[0].copy_(conv)
                    layer.recurrent_states[0].copy_(rec)
                crop_attention(cache, start)
        figures[f"budget_{budget}"]["native_gdn_ms_median"] = statistics.median(timed(native, args.repeats))

    summary = {"gpu": torch.cuda.get_device_properties(0).name if device.type == "cuda" else "cpu", "layers": args.layers, "scale_to_64_layers": 64 / args.layers,
               "weights_gb": weights_gb, "build_s": build_s, "prefix": args.prefix, "block_size": args.block_size,
               "torch": torch.__version__, "transformers": __import__("transformers").__version__,
               "cuda": torch.version.cuda, "figures": figures}
    print("VERIFY_MS " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
