"""`make verify-prepare-data`: speculators' own scripts/prepare_data.py, at the trainer stack's pinned release and
from its committed lock, over the converted fixture rows; writes what it measured to
gpuhosts/measured/speculators-<version>-prepare-data.json, which the plan derives the data set's size and its share
of over-long samples from (gpuhosts/dataset_size.py).

1. installs locks/speculators-<version>-py3.12.txt into build/engines/ (tests/verify_engines/run.py `install`,
   `uv pip sync --require-hashes`; its torch runs on the CPU) and checks out the release's scripts/ at its tag
   (SPECULATORS_REPOSITORY: a clone or mirror of vllm-project/speculators);
2. converts each converter's fixture rows (tests/fixtures/datasets/<converter>/rows.jsonl) with the node's own
   converter, gpuhosts/hostside/dataset_prepare.py, in that environment;
3. runs tests/verify_prepare_data/measure.py there: it builds a small verifier directory (a trained byte-level BPE
   tokenizer with the strict chat template, inside Qwen3.5/3.6's processor class), runs prepare_data.py once per
   converter uncut (the rows' whole lengths) and once over the mix repeated at the stack's hyper.maxSeqLen (what
   it stores, column by column, and the arrow files' bytes);
4. ends with one line: `prepare-data: speculators-0.7.0=ok bytes_per_token=… rows=…`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "verify_engines"))

import run as engines  # noqa: E402  tests/verify_engines/run.py

from gpuhosts.dataset_size import measurement_path  # noqa: E402
from gpuhosts.hostside.dataset_prepare import CONVERTERS  # noqa: E402

HERE = Path(__file__).resolve().parent
ROWS = ROOT / "tests" / "fixtures" / "datasets"
# Each row repeated this often in the size run, so that the arrow file's own overhead is a small part of its bytes.
REPEAT = 50


def fixture(measured: dict, version: str, lock: Path) -> dict:
    stored = measured["stored"]
    tokens = sum(stored["seq_len"])
    messages = stored["column_bytes"].get("messages", 0)
    return {
        "producedBy": f"make verify-prepare-data (tests/verify_prepare_data/run.py): speculators {version} "
                      f"scripts/prepare_data.py at tag v{version}, installed from {lock.relative_to(ROOT)}, on the "
                      "CPU, over the converted fixture rows of tests/fixtures/datasets/<converter>/rows.jsonl",
        "speculators": version,
        "versions": measured["versions"],
        "verifier": measured["verifier"],
        "converters": {name: {"fixture": f"tests/fixtures/datasets/{name}/rows.jsonl", "rows": len(lengths),
                              "tokens": lengths}
                       for name, lengths in sorted(measured["lengths"].items())},
        "stored": {"seqLength": measured["seq_length"], "repeat": measured["repeat"], "samples": stored["rows"],
                   "tokens": tokens, "features": stored["features"], "arrowTypes": stored["arrow_types"],
                   "columnBytes": stored["column_bytes"], "files": stored["files"],
                   "arrowBytes": stored["arrow_bytes"]},
        # The arrow files' bytes over the tokens they hold, in two parts: `messages` (a processor verifier's; the
        # whole conversation, however long, so per token of the uncut sample) and the rest (input_ids, loss_mask,
        # seq_len: per token stored). No row of the size run is cut, so the two counts of tokens are the same here.
        "bytesPerToken": round(stored["arrow_bytes"] / tokens, 3),
        "messageBytesPerToken": round(messages / tokens, 3),
        "tokenBytesPerToken": round((stored["arrow_bytes"] - messages) / tokens, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a Python 3.12 for the environment")
    parser.add_argument("--uv", default=str(ROOT / ".tools" / "bin" / "uv"))
    args = parser.parse_args(argv)
    # The stack's values as written, not validated: the plan refuses a mix whose size no measurement derives, and
    # this run is what makes the measurement.
    import yaml
    training = yaml.safe_load(engines.TRAINER_STACK.read_text())["config"]["gpuhosts:training"]
    version = training["speculators"]["version"]
    max_seq_len = training["hyper"].get("maxSeqLen", 8192)
    target = engines.Target("speculators", version, training.get("python", "3.12"))
    venv = engines.install(target, args.python, args.uv)
    checkout = Path(engines.checkout(target)[0])
    python = str(venv / "bin" / "python")
    with tempfile.TemporaryDirectory(prefix="verify-prepare-data-") as work:
        work = Path(work)
        pairs = []
        for converter in CONVERTERS:
            rows = ROWS / converter / "rows.jsonl"
            if not rows.is_file():
                continue
            out = work / "converted" / f"{converter}.jsonl"
            out.parent.mkdir(exist_ok=True)
            subprocess.run([python, str(ROOT / "gpuhosts" / "hostside" / "dataset_prepare.py"), "convert",
                            "--converter", converter, "--out", str(out), str(rows)], check=True,
                           capture_output=True)
            pairs.append(f"{converter}={out}")
        done = subprocess.run([python, str(HERE / "measure.py"), str(checkout), str(work / "measure"),
                               str(max_seq_len), str(REPEAT), *pairs],
                              capture_output=True, text=True, cwd=ROOT)
    lines = [l for l in done.stdout.splitlines() if l.startswith("MEASURED ")]
    if done.returncode != 0 or len(lines) != 1:
        sys.stderr.write(done.stderr[-6000:])
        print(f"prepare-data: speculators-{version}=FAIL:measure.py_exited_{done.returncode}")
        return 1
    result = fixture(json.loads(lines[0].removeprefix("MEASURED ")), version, target.lock.path())
    path = measurement_path(version)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"prepare-data: speculators-{version}=ok bytes_per_token={result['bytesPerToken']} "
          f"rows={sum(c['rows'] for c in result['converters'].values())} wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
