#!/usr/bin/env python3
"""Turns the rows of the declared training-data sources into one ShareGPT mix that Qwen3.6's chat template accepts.

Managed by gpuhosts: shipped verbatim to the training node (/usr/local/lib/gpuhosts/dataset-prepare.py) and run
with the speculators environment's python. The standard library only, except pyarrow for .parquet inputs.

    dataset-prepare.py convert --converter NAME --out OUT.jsonl [--source REPO] INPUT...
        INPUT: .jsonl, .json or .parquet files of one source. Writes one ShareGPT row a line,
        {"conversations": [{"from": "system"|"human"|"gpt"|"tool", "value": ...}], "source": REPO}, after the
        strict-template transform; prints {"rows": N, "skipped": M, "sha256": ...}. REPO defaults to OUT's stem.
    dataset-prepare.py mix --spec SPEC.json --out DIR
        SPEC: {"seed": S, "sources": [{"name": "<repo>@<rev>:<split>", "converted": PATH, "count": N}]}. Takes
        the first N rows of each converted file after a shuffle seeded by S and the source's name, shuffles the
        union with S, writes DIR/mix.jsonl and then DIR/manifest.json; prints the manifest.

Exit codes: 0 done; 2 bad input (unknown converter, unreadable input or spec, a source with fewer rows than asked);
1 anything else. Every file is written to a temporary name and renamed, so an interrupted run leaves no half file.

The strict-template transform follows what Qwen3.5/3.6's chat template refuses (its `raise_exception` calls: "No
messages provided.", "No user query found in messages.", "System message must be at the beginning.", "Unexpected
message role.") and how it renders tool calls (`<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>
\\n</function>\\n</tool_call>` after the assistant's text) and tool results (`tool` turns right after the call).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

# Role spellings found in the seed's sources and in ShareGPT dumps, as the four roles a ShareGPT row may carry.
# "function_call" is an assistant turn that calls a function; "observation", "function_response" and "ipython"
# carry a tool's result.
ROLES = {"system": "system", "human": "human", "user": "human", "gpt": "gpt", "assistant": "gpt",
         "chatgpt": "gpt", "bing": "gpt", "bard": "gpt", "function_call": "gpt", "tool": "tool",
         "observation": "tool", "function": "tool", "function_response": "tool", "ipython": "tool"}

Turn = dict[str, Any]  # {"role": system|human|gpt|tool, "value": str, "calls": [{"name", "arguments"}]}


class InputError(Exception):
    """Bad input: exit code 2."""


# --- converters: one row of a dataset's documented schema -> turns, or None for a row that cannot be used -------

def _text(value: Any) -> str | None:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # OpenAI content parts: only the text parts can be trained on
        parts = [p.get("text") for p in value if isinstance(p, dict) and p.get("type", "text") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str)) if len(parts) == len(value) else None
    return None


def _turn(role: str, value: str, calls: list[dict] | None = None) -> Turn:
    return {"role": role, "value": value, "calls": calls or []}


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _call(function: Any) -> dict | None:
    """An OpenAI function call ({"name", "arguments": JSON text or object}) as {"name", "arguments": object}."""
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        return None
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        arguments = _json(arguments) if arguments.strip() else {}
    if not isinstance(arguments, dict):
        return None
    return {"name": function["name"], "arguments": arguments}


def _openai_calls(value: Any) -> list[dict] | None:
    calls = _json(value) if isinstance(value, str) else value
    if calls is None:
        return []
    if not isinstance(calls, list):
        return None
    found = [_call(c.get("function", c)) if isinstance(c, dict) else None for c in calls]
    return None if None in found else found


def _system_first(system: Any, turns: list[Turn]) -> list[Turn] | None:
    text = _text(system)
    if text is None:
        return None
    return ([_turn("system", text)] if text.strip() else []) + turns


def convert_sharegpt(row: dict) -> list[Turn] | None:
    """ShareGPT: {"conversations": [{"from", "value"}], optional "system"}."""
    conversation = row.get("conversations", row.get("conversation"))
    if not isinstance(conversation, list):
        return None
    turns = []
    for item in conversation:
        if not isinstance(item, dict) or ROLES.get(item.get("from")) is None or not isinstance(item.get("value"), str):
            return None
        turns.append(_turn(ROLES[item["from"]], item["value"]))
    return _system_first(row.get("system"), turns)


def convert_orca(row: dict) -> list[Turn] | None:
    """OpenOrca: {"id", "system_prompt", "question", "response"}."""
    question, response = row.get("question"), row.get("response")
    if not isinstance(question, str) or not isinstance(response, str):
        return None
    return _system_first(row.get("system_prompt"), [_turn("human", question), _turn("gpt", response)])


def convert_alpaca(row: dict) -> list[Turn] | None:
    """Alpaca: {"instruction", "input", "output"}; Magicoder's Evol-Instruct names the output "response"."""
    instruction, extra = row.get("instruction"), row.get("input") or ""
    output = row.get("output", row.get("response"))
    if not isinstance(instruction, str) or not isinstance(output, str) or not isinstance(extra, str):
        return None
    prompt = f"{instruction}\n\n{extra}" if extra.strip() else instruction
    return _system_first(row.get("system"), [_turn("human", prompt), _turn("gpt", output)])


def _tools_text(tools: Any) -> str | None:
    tools = _json(tools)
    if not tools:
        return ""
    if not isinstance(tools, list):
        return None
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return f"# Tools\n\nYou have access to the following functions:\n\n<tools>\n{lines}\n</tools>"


def convert_openai_messages(row: dict) -> list[Turn] | None:
    """OpenAI chat: {"messages": [{"role", "content", "tool_calls": [{"function": {"name", "arguments"}}]}],
    optional "tools"}; `messages_json`/`tool_calls_json` where a source stores them as JSON text."""
    messages = row["messages"] if "messages" in row else _json(row.get("messages_json"))
    if not isinstance(messages, list):
        return None
    turns = []
    for message in messages:
        if not isinstance(message, dict) or ROLES.get(message.get("role")) is None:
            return None
        text = _text(message.get("content"))
        calls = _openai_calls(message.get("tool_calls", message.get("tool_calls_json")))
        if text is None or calls is None:
            return None
        turns.append(_turn(ROLES[message["role"]], text, calls))
    tools = _tools_text(row.get("tools"))
    if tools is None:
        return None
    if tools:
        turns = [_turn("system", tools)] + turns
    return turns


_TAGGED_CALL = re.compile(r"^\s*(?:<tool_call>|<functioncall>)?\s*(\{.*\})\s*(?:</tool_call>)?\s*$", re.DOTALL)
_RESPONSE = re.compile(r"^\s*(?:<tool_response>(.*)</tool_response>|FUNCTION RESPONSE:(.*))\s*$", re.DOTALL)


def _text_call(text: str) -> dict | None:
    """An assistant text that is only a function call in JSON ({"name", "arguments"}), bare or in tags."""
    match = _TAGGED_CALL.match(text)
    parsed = _json(match[1]) if match else None
    return _call(parsed) if isinstance(parsed, dict) and set(parsed) <= {"name", "arguments"} else None


def convert_tool_calls(row: dict) -> list[Turn] | None:
    """Messages whose tool calls are OpenAI `tool_calls` or assistant texts holding only a JSON call, and whose tool
    results are `tool` messages or user messages right after a call holding only a response (JSON or tagged) —
    the form of the Qwen-format function-calling sets built from Glaive."""
    turns = convert_openai_messages(row)
    if turns is None:
        return None
    for index, turn in enumerate(turns):
        if turn["role"] == "gpt" and not turn["calls"]:
            call = _text_call(turn["value"])
            if call is not None:
                turn["value"], turn["calls"] = "", [call]
        elif turn["role"] == "human" and index and turns[index - 1]["calls"]:
            match = _RESPONSE.match(turn["value"])
            body = (match[1] if match[1] is not None else match[2]).strip() if match else turn["value"].strip()
            if match or isinstance(_json(body), (dict, list)):
                turn["role"], turn["value"] = "tool", body
    return turns


_GLAIVE_MARK = re.compile(r"(?:^|\n)\s*(USER|ASSISTANT|FUNCTION RESPONSE):\s?")
_GLAIVE_CALL = re.compile(r"<functioncall>\s*(\{.*\})\s*$", re.DOTALL)
_GLAIVE_QUOTED = re.compile(r'^\{\s*"name"\s*:\s*"([^"]+)"\s*,\s*"arguments"\s*:\s*\'(.*)\'\s*\}$', re.DOTALL)


def _glaive_call(text: str) -> dict | None:
    # Glaive writes the arguments as a single-quoted JSON string: {"name": "f", "arguments": '{"a": 1}'}.
    parsed = _json(text)
    if parsed is None:
        quoted = _GLAIVE_QUOTED.match(text)
        parsed = {"name": quoted[1], "arguments": quoted[2]} if quoted else None
    return _call(parsed)


def convert_glaive(row: dict) -> list[Turn] | None:
    """Glaive Function Calling v2: {"system": "SYSTEM: ...", "chat": "USER: ... ASSISTANT: ... <functioncall> {...}
    <|endoftext|> FUNCTION RESPONSE: {...} ..."}."""
    system, chat = row.get("system"), row.get("chat")
    if not isinstance(system, str) or not isinstance(chat, str):
        return None
    system = re.sub(r"^\s*SYSTEM:\s*", "", system).strip()
    pieces = _GLAIVE_MARK.split(chat)
    if pieces[0].strip():
        return None
    turns = []
    for mark, body in zip(pieces[1::2], pieces[2::2]):
        body = body.replace("<|endoftext|>", "").strip()
        if mark == "USER":
            turns.append(_turn("human", body))
        elif mark == "FUNCTION RESPONSE":
            turns.append(_turn("tool", body))
        else:
            found = _GLAIVE_CALL.search(body)
            if found is None:
                turns.append(_turn("gpt", body))
                continue
            call = _glaive_call(found[1])
            if call is None:
                return None
            turns.append(_turn("gpt", body[:found.start()].strip(), [call]))
    return _system_first(system, turns)


CONVERTERS: dict[str, Callable[[dict], list[Turn] | None]] = {
    "sharegpt": convert_sharegpt,
    "orca": convert_orca,
    "alpaca": convert_alpaca,
    "openai-messages": convert_openai_messages,
    "glaive-function-calling": convert_glaive,
    "tool-calls": convert_tool_calls,
}


# --- the strict-template transform ---------------------------------------------------------------------------

def render_calls(text: str, calls: list[dict]) -> str:
    """An assistant turn's text and calls as Qwen3.6's template renders `tool_calls` after the content."""
    out = text
    for index, call in enumerate(calls):
        head = ("\n\n" if text.strip() else "") if index == 0 else "\n"
        params = "".join(
            f"<parameter={key}>\n"
            f"{json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else _plain(value)}"
            "\n</parameter>\n" for key, value in call["arguments"].items())
        out += f"{head}<tool_call>\n<function={call['name']}>\n{params}</function>\n</tool_call>"
    return out


def _plain(value: Any) -> str:
    # Jinja's `string` filter on the template's side: Python's str() of the decoded JSON value.
    return str(value)


def _is_wrapped_response(text: str) -> bool:
    text = text.strip()
    return text.startswith("<tool_response>") and text.endswith("</tool_response>")


def strict_template(turns: list[Turn]) -> list[dict] | None:
    """Turns as ShareGPT turns the strict template renders, or None when nothing trainable is left.

    One system turn, first (later ones are folded into it: the template refuses a system turn after the first);
    a tool turn only right after an assistant call or another tool turn (elsewhere it is what the user said);
    consecutive human or assistant turns merged; nothing before the first human turn but the system turn,
    nothing after the last assistant turn; at least one human query that is not a bare tool response (the
    template's "No user query found").
    """
    system = [t["value"].strip() for t in turns if t["role"] == "system" and t["value"].strip()]
    out: list[Turn] = []
    for turn in (t for t in turns if t["role"] != "system"):
        role, value = turn["role"], turn["value"]
        if not value.strip() and not turn["calls"]:
            continue
        if role == "tool" and not (out and (out[-1]["calls"] or out[-1]["role"] == "tool")):
            role = "human"
        if not out and role != "human":
            continue
        if out and role == out[-1]["role"] and role != "tool":
            previous = out[-1]
            previous["value"] = "\n\n".join(v for v in (render_calls(previous["value"], previous["calls"]), value) if v.strip())
            previous["calls"] = list(turn["calls"])
            continue
        out.append(_turn(role, value, turn["calls"]))
    while out and out[-1]["role"] != "gpt":
        out.pop()
    if not any(t["role"] == "human" and not _is_wrapped_response(t["value"]) for t in out):
        return None
    rows = [{"from": "system", "value": "\n\n".join(system)}] if system else []
    return rows + [{"from": t["role"], "value": render_calls(t["value"], t["calls"]) if t["calls"] else t["value"]}
                   for t in out]


# --- reading and writing -------------------------------------------------------------------------------------

def read_rows(path: Path) -> Iterator[dict | None]:
    """The rows of one input file; None for a line that is not a JSON object (counted as skipped)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # only parquet inputs need it; the speculators environment has it

        for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
            yield from batch.to_pylist()
    elif suffix == ".jsonl":
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    row = _json(line)
                    yield row if isinstance(row, dict) else None
    elif suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        for row in data if isinstance(data, list) else [data]:
            yield row if isinstance(row, dict) else None
    else:
        raise InputError(f"{path}: not a .jsonl, .json or .parquet file")


class _Atomic:
    """A file written under a temporary name in its directory and renamed into place only when complete."""

    def __init__(self, target: Path):
        self.target = target

    def __enter__(self):
        self.target.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.target.name}.", dir=self.target.parent)
        self.handle = os.fdopen(fd, "wb")
        self.digest = hashlib.sha256()
        return self

    def write(self, data: bytes) -> None:
        self.handle.write(data)
        self.digest.update(data)

    def __exit__(self, kind, *_):
        self.handle.close()
        if kind is None:
            os.replace(self.tmp, self.target)
        else:
            os.unlink(self.tmp)
        return False


def convert(converter: str, inputs: Iterable[Path], out: Path, source: str) -> dict:
    if converter not in CONVERTERS:
        raise InputError(f"unknown converter {converter!r}; known: {', '.join(CONVERTERS)}")
    rows = skipped = 0
    with _Atomic(out) as target:
        for path in inputs:
            if not path.is_file():
                raise InputError(f"{path}: no such file")
            for row in read_rows(path):
                turns = CONVERTERS[converter](row) if row is not None else None
                conversation = strict_template(turns) if turns is not None else None
                if conversation is None:
                    skipped += 1
                    continue
                line = json.dumps({"conversations": conversation, "source": source}, ensure_ascii=False)
                target.write(line.encode("utf-8") + b"\n")
                rows += 1
    return {"rows": rows, "skipped": skipped, "sha256": target.digest.hexdigest()}


def _line_offsets(path: Path) -> list[int]:
    offsets, position = [], 0
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                offsets.append(position)
            position += len(line)
    return offsets


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_spec(path: Path) -> tuple[int, list[dict]]:
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: cannot read the spec ({error})") from None
    seed, sources = spec.get("seed") if isinstance(spec, dict) else None, spec.get("sources") if isinstance(spec, dict) else None
    if not isinstance(seed, int) or isinstance(seed, bool) or not isinstance(sources, list) or not sources:
        raise InputError(f"{path}: needs an integer \"seed\" and a non-empty \"sources\" list")
    for index, item in enumerate(sources):
        if (not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get("converted"), str)
                or not isinstance(item.get("count"), int) or isinstance(item.get("count"), bool) or item["count"] < 1):
            raise InputError(f"{path}: sources[{index}] needs \"name\", \"converted\" and a positive \"count\"")
    return seed, sources


def mix(spec_path: Path, out: Path) -> dict:
    seed, sources = _read_spec(spec_path)
    picked: list[tuple[int, int]] = []
    entries = []
    for index, item in enumerate(sources):
        path = Path(item["converted"])
        if not path.is_file():
            raise InputError(f"source {item['name']}: converted file {path} does not exist")
        offsets = _line_offsets(path)
        if len(offsets) < item["count"]:
            raise InputError(f"source {item['name']}: {path} has {len(offsets)} rows, the mix asks for {item['count']}; "
                             "lower its count or convert more of it")
        # Seeded by the source's name too: reordering the spec's sources does not change what each contributes.
        random.Random(f"{seed}:{item['name']}").shuffle(offsets)
        picked += [(index, offset) for offset in offsets[:item["count"]]]
        entries.append({"name": item["name"], "count": item["count"], "sha256": _file_sha256(path)})
    random.Random(seed).shuffle(picked)
    handles = [Path(item["converted"]).open("rb") for item in sources]
    try:
        with _Atomic(out / "mix.jsonl") as target:
            for index, offset in picked:
                handles[index].seek(offset)
                line = handles[index].readline()
                target.write(line if line.endswith(b"\n") else line + b"\n")
    finally:
        for handle in handles:
            handle.close()
    manifest = {"seed": seed, "total": len(picked), "sources": entries, "sha256": target.digest.hexdigest()}
    with _Atomic(out / "manifest.json") as written:
        written.write((json.dumps(manifest, indent=2) + "\n").encode("utf-8"))
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dataset-prepare.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    convert_cmd = commands.add_parser("convert", help="convert one source's files to strict-template ShareGPT rows")
    convert_cmd.add_argument("--converter", required=True)
    convert_cmd.add_argument("--out", required=True, type=Path)
    convert_cmd.add_argument("--source", help="the rows' \"source\" (the dataset repo); default: OUT's stem")
    convert_cmd.add_argument("inputs", nargs="+", type=Path)
    mix_cmd = commands.add_parser("mix", help="draw the declared counts from the converted files and shuffle them")
    mix_cmd.add_argument("--spec", required=True, type=Path)
    mix_cmd.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "convert":
            result = convert(args.converter, args.inputs, args.out, args.source or args.out.stem)
        else:
            result = mix(args.spec, args.out)
    except InputError as error:
        print(f"dataset-prepare: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, separators=(",", ":")) if args.command == "convert" else json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
