"""Lossless check of DFlash's and DDTree's speculative decoding on a GDN-hybrid target, run inside DDTree's locked
environment with a DDTree checkout as working directory (tests/verify_ddtree/run.py starts it).

The target is transformers' own `Qwen3_5ForCausalLM` with random weights and Qwen3.6-27B's layer pattern (three Gated
DeltaNet layers, then one full-attention layer, repeated) scaled down; the drafter is DDTree's `DFlashDraftModel`
(model/dflash.py) with random weights. At temperature 0 each method's tokens must equal the greedy decode
(dflash.py `dflash_generate` with block_size 1, DDTree benchmark.py's own baseline), which must itself equal a greedy
decode that recomputes the whole sequence at every token, without a cache.

`--mode fixed` runs the checkout as it is; `--mode without-fix` builds the target's cache from its config but leaves
the linear-attention states as the verify pass left them (the tree-aware verify swapped for a no-op), which is what
the checkout would do without its fix; `--mode upstream` is a checkout without the patch. Prints one line
`CASE {json}` per case as it ends, then `LOSSLESS {json}`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import traceback

import torch


def target_config(vocab: int, blocks: int):
    from transformers import Qwen3_5TextConfig

    # Qwen3.6-27B: 16 x (3 x Gated DeltaNet + 1 x gated attention); attention 24 Q / 4 KV heads of 256, Gated
    # DeltaNet 48 V / 16 QK heads of 128, conv kernel 4, partial rotary 0.25 (the model card). Scaled down, the
    # same ratios: 6 Q / 1 KV heads, 6 V / 2 QK heads.
    layer_types = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * blocks
    return Qwen3_5TextConfig(
        vocab_size=vocab, hidden_size=96, intermediate_size=256, num_hidden_layers=len(layer_types),
        layer_types=layer_types, num_attention_heads=6, num_key_value_heads=1, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, max_position_embeddings=4096, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
    )


def drafter_config(target, mask_token_id: int, block_size: int):
    from transformers import Qwen3Config
    from model.utils import build_target_layer_ids

    layers = 2
    config = Qwen3Config(
        vocab_size=target.vocab_size, hidden_size=target.hidden_size, intermediate_size=256,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        max_position_embeddings=4096, layer_types=["sliding_attention", "full_attention"], sliding_window=24,
        use_sliding_window=True,
    )
    config.block_size = block_size
    config.num_target_layers = target.num_hidden_layers
    config.dflash_config = {"mask_token_id": mask_token_id,
                            "target_layer_ids": build_target_layer_ids(target.num_hidden_layers, layers)}
    return config


def greedy_without_cache(target, input_ids: torch.Tensor, max_new_tokens: int) -> tuple[list[int], list[float]]:
    ids = input_ids
    margins = []
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            logits = target(ids, use_cache=False).logits[0, -1].float()
            top = torch.topk(logits, 2).values
            margins.append(float(top[0] - top[1]))
            ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
    return ids[0, input_ids.shape[1]:].tolist(), margins


def guided(drafter, target, prompt_length: int, reference: list[int], seed: int):
    """The drafter with its proposals for a random number of leading block positions (0 to all) replaced by the
    greedy continuation, so that verify accepts paths of every depth: a random drafter alone seldom passes depth
    2. Its cache and context features are DDTree's as ever; only the returned hidden states change, to the
    lm_head row of the continuation's token scaled to a logit of 30."""
    original = drafter.forward
    generator = torch.Generator().manual_seed(seed)
    rows = target.lm_head.weight

    def forward(*args, **kwargs):
        out = original(*args, **kwargs).clone()
        block = out.shape[1]
        start = int(kwargs["position_ids"][0, -1]) - (block - 1)
        keep = int(torch.randint(0, block, (1,), generator=generator))
        for j in range(1, keep + 1):
            index = start + j - prompt_length
            if 0 <= index < len(reference):
                row = rows[reference[index]]
                out[0, j] = row * (30.0 / float(row.float().square().sum()))
        return out

    drafter.forward = forward
    return lambda: drafter.__dict__.pop("forward")


def no_linear_fix():
    """The checkout with its cache built from the config but the linear-attention states left as the verify pass
    left them: what the run does without the tree-aware verify."""
    import dflash
    import ddtree

    class Nothing:
        def commit(self, cache, accepted):
            pass

    for module in (dflash, ddtree):
        module.linear_attention_verify = lambda target: Nothing()
        module.verifying = lambda verifier, visibility: contextlib.nullcontext()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["fixed", "without-fix", "upstream"], default="fixed")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--budgets", default="16,64,256")
    parser.add_argument("--block-sizes", default="4,16")
    parser.add_argument("--prompts", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, ".")

    from transformers import Qwen3_5ForCausalLM
    from model import DFlashDraftModel
    from dflash import dflash_generate
    from ddtree import ddtree_generate

    if args.mode == "without-fix":
        no_linear_fix()
    if args.mode == "upstream" and not torch.cuda.is_available():
        # Upstream's timer synchronises CUDA unconditionally; on CPU that, not the cache, would be the failure.
        import dflash
        import ddtree
        dflash.cuda_time = ddtree.cuda_time = time.perf_counter

    dtype = getattr(torch, args.dtype)
    vocab = 64
    mask_token_id = vocab - 1
    torch.manual_seed(0)
    target = Qwen3_5ForCausalLM(target_config(vocab, blocks=2)).to(device=args.device, dtype=dtype).eval()
    budgets = [int(b) for b in args.budgets.split(",")]
    block_sizes = [int(b) for b in args.block_sizes.split(",")]
    drafters = {}
    for block_size in block_sizes:
        torch.manual_seed(100 + block_size)
        drafters[block_size] = DFlashDraftModel(drafter_config(target.config, mask_token_id, block_size)).to(
            device=args.device, dtype=dtype).eval()

    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, vocab - 1, (1, length), generator=generator).to(args.device)
               for length in (9, 23, 40, 17, 31)[: args.prompts]]
    cases = []
    began = time.perf_counter()

    def record(name: str, prompt: int, reference: list[int], got, margins: list[float], **extra) -> None:
        case = {"case": name, "prompt": prompt, **extra}
        if isinstance(got, BaseException):
            case.update(identical=False, error=f"{type(got).__name__}: {got}"[:300])
        else:
            tokens = got.output_ids[0, got.num_input_tokens:].tolist()
            first = next((i for i, (x, y) in enumerate(zip(tokens, reference)) if x != y), None)
            if first is None and len(tokens) != len(reference):
                first = min(len(tokens), len(reference))
            case.update(identical=first is None, tokens=len(tokens),
                        mean_acceptance=(sum(got.acceptance_lengths) / len(got.acceptance_lengths)
                                         if getattr(got, "acceptance_lengths", None) else None),
                        max_acceptance=max(got.acceptance_lengths) if getattr(got, "acceptance_lengths", None) else None)
            if first is not None:
                case.update(first_divergence=first,
                            margin_at_divergence=margins[first] if first < len(margins) else None)
        case["elapsed_s"] = round(time.perf_counter() - began, 2)
        cases.append(case)
        print("CASE " + json.dumps(case), flush=True)

    def attempt(call):
        try:
            return call()
        except Exception as error:  # a failure is that case's finding
            traceback.print_exc(file=sys.stderr)
            return error

    for p, input_ids in enumerate(prompts):
        reference, margins = greedy_without_cache(target, input_ids, args.max_new_tokens)
        common = dict(target=target, input_ids=input_ids, mask_token_id=mask_token_id,
                      max_new_tokens=args.max_new_tokens, stop_token_ids=None, temperature=0.0)
        any_drafter = drafters[block_sizes[0]]
        baseline = attempt(lambda: dflash_generate(model=any_drafter, block_size=1, **common))
        record("greedy-cached", p, reference, baseline, margins)
        for block_size in block_sizes:
            drafter = drafters[block_size]
            got = attempt(lambda: dflash_generate(model=drafter, block_size=block_size, **common))
            record("dflash", p, reference, got, margins, block_size=block_size)
            for budget in budgets:
                got = attempt(lambda: ddtree_generate(model=drafter, block_size=block_size, tree_budget=budget,
                                                      **common))
                record("ddtree", p, reference, got, margins, block_size=block_size, budget=budget)
            release = guided(drafter, target, input_ids.shape[1], reference, seed=10 * p + block_size)
            got = attempt(lambda: dflash_generate(model=drafter, block_size=block_size, **common))
            record("dflash-guided", p, reference, got, margins, block_size=block_size)
            for budget in budgets:
                got = attempt(lambda: ddtree_generate(model=drafter, block_size=block_size, tree_budget=budget,
                                                      **common))
                record("ddtree-guided", p, reference, got, margins, block_size=block_size, budget=budget)
            release()

    speculative = [c for c in cases if c["case"] != "greedy-cached"]
    summary = {"mode": args.mode, "dtype": args.dtype, "device": args.device,
               "cases": len(speculative), "identical": sum(c["identical"] for c in speculative),
               "greedy_cached_identical": sum(c["identical"] for c in cases if c["case"] == "greedy-cached"),
               "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
               "torch": torch.__version__, "transformers": __import__("transformers").__version__,
               "cases_detail": cases}
    print("LOSSLESS " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
