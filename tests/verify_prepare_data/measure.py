"""Runs inside the speculators environment (its Python, its packages): speculators' own scripts/prepare_data.py over
the converted fixture rows, then reads what it wrote. Prints one line, `MEASURED {...}` (see run.py).

argv: CHECKOUT WORKDIR SEQ_LENGTH REPEAT, then CONVERTER=FILE.jsonl pairs (ShareGPT rows made by the node's
converter). The verifier directory is built here: a byte-level BPE tokenizer (the `tokenizers` library) trained on
the interpreter's own standard library, saved as a PreTrainedTokenizerFast with the strict
chat template, inside a Qwen3VLProcessor, the processor class of Qwen3.5/3.6 (so AutoProcessor returns a processor
and prepare_data.py writes the `messages` column, as it does for the real verifier).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "tests" / "fixtures" / "datasets" / "qwen36-strict-template.jinja"
# The special tokens Qwen3.5/3.6's template writes; kept whole by the tokenizer, as the real one does.
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<tool_response>", "</tool_response>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>"]
VOCAB = 16384
# Large enough that prepare_data.py cuts nothing: the rows' whole lengths.
UNCUT = 1 << 22


def corpus() -> list[str]:
    """Training text: the standard library's sources (English prose and code, the mix's kinds of text), in a fixed
    order so the tokenizer is the same on every run. Not the fixture rows: a vocabulary learnt from the rows it
    then tokenizes would hold their phrases whole and count too few tokens."""
    texts = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py"))[:400]:
        texts.append(path.read_text(errors="replace"))
    return texts


def build_verifier(directory: Path) -> dict:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    template = TEMPLATE.read_text()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=template)
    fast.image_token, fast.video_token = "<|image_pad|>", "<|video_pad|>"
    fast.vision_start_token, fast.vision_end_token = "<|vision_start|>", "<|vision_end|>"
    processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=fast,
                                 video_processor=Qwen3VLVideoProcessor(), chat_template=template)
    processor.save_pretrained(directory)
    return {"kind": type(processor).__name__, "tokenizer": "byte-level BPE (tokenizers), vocab "
            f"{tokenizer.get_vocab_size()}, trained on the first 400 modules of the Python "
            f"{sys.version.split()[0]} standard library", "chat_template": str(TEMPLATE.relative_to(ROOT))}


def prepare(checkout: Path, verifier: Path, data: list[Path], out: Path, seq_length: int) -> None:
    argv = [sys.executable, str(checkout / "scripts" / "prepare_data.py"), "--model", str(verifier),
            *[w for path in data for w in ("--data", str(path))], "--output", str(out),
            "--seq-length", str(seq_length), "--seed", "0", "--num-preprocessing-workers", "1"]
    done = subprocess.run(argv, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""})
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-6000:])
        raise RuntimeError(f"prepare_data.py exited {done.returncode}")


def read(out: Path) -> dict:
    from datasets import load_from_disk

    dataset = load_from_disk(str(out))
    table = dataset.data.table
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    return {"rows": len(dataset), "seq_len": [int(n) for n in dataset["seq_len"]],
            "features": {name: str(feature) for name, feature in dataset.features.items()},
            "arrow_types": {name: str(table.schema.field(name).type) for name in table.column_names},
            "column_bytes": {name: int(table.column(name).nbytes) for name in table.column_names},
            "files": files, "arrow_bytes": sum(v for k, v in files.items() if k.endswith(".arrow"))}


def main() -> int:
    checkout, work, seq_length, repeat = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    sources = dict(arg.split("=", 1) for arg in sys.argv[5:])
    paths = {name: Path(path) for name, path in sources.items()}
    verifier = work / "verifier"
    described = build_verifier(verifier)
    lengths = {}
    for name, path in paths.items():
        out = work / f"uncut-{name}"
        prepare(checkout, verifier, [path], out, UNCUT)
        lengths[name] = sorted(read(out)["seq_len"])
    # The size run: the whole mix at the training's sequence length, each row `repeat` times so that the arrow
    # file's per-file overhead is a small part of its bytes.
    mixed = work / "mix.jsonl"
    with mixed.open("w") as handle:
        for _ in range(repeat):
            for path in paths.values():
                handle.write(path.read_text())
    out = work / "tokenized"
    prepare(checkout, verifier, [mixed], out, seq_length)
    stored = read(out)
    from importlib.metadata import version

    print("MEASURED " + json.dumps({
        "verifier": described, "lengths": lengths, "stored": stored, "seq_length": seq_length, "repeat": repeat,
        "versions": {**{name: version(name) for name in ("speculators", "transformers", "datasets", "tokenizers",
                                                          "torch", "pyarrow")},
                     "python": sys.version.split()[0]}}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
