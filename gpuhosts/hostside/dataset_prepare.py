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
        N distinct samples of each converted file in an order seeded by S and the source's name, skipping a row
        whose sample (its turns, lower-cased, whitespace collapsed) an earlier source of the spec or an earlier
        row gave; shuffles the union with S, writes DIR/mix.jsonl and then DIR/manifest.json (per source: kept,
        dropped, and whose duplicates they were); prints the manifest.
    dataset-prepare.py files --split SPLIT [--subset DIR] [--data-files PATTERN...] REPO_DIR
        The files of a downloaded repository that the source reads, one a line: those PATTERNs match, else the
        split's by the Hub's rule (see split_files).

Exit codes: 0 done; 2 bad input (unknown converter, unreadable input or spec, a source with fewer rows or distinct
samples than asked, a split with no file); 1 anything else. Every file is written to a temporary name and renamed,
so an interrupted run leaves no half file.

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
from fnmatch import fnmatchcase
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


# --- which files of a repository are a split's: the Hub's rule -----------------------------------------------
#
# A source without dataFiles reads the files the Hub itself assigns to its split: the `datasets` library's data-files
# resolution, which the Hub's viewer and `load_dataset` share (huggingface/datasets 5.0.0, the release speculators
# 0.7.0's environment locks, src/datasets/data_files.py: SPLIT_PATTERN_SHARDED, SPLIT_KEYWORDS,
# KEYWORDS_IN_FILENAME_BASE_PATTERNS / KEYWORDS_IN_DIR_NAME_BASE_PATTERNS for fsspec >= 2023.12,
# DEFAULT_PATTERNS_SPLIT_IN_FILENAME, DEFAULT_PATTERNS_SPLIT_IN_DIR_NAME, DEFAULT_PATTERNS_ALL, ALL_DEFAULT_PATTERNS,
# FILES_TO_IGNORE, _get_data_files_patterns, resolve_pattern; src/datasets/load.py HubDatasetModuleFactory.get_module
# and infer_module_for_data_files_list; the Hub's docs, "File names and splits": files named after no split are all
# `train`). A README's `configs:` block is not read: a source that needs one names its files in dataFiles.

SPLIT_PATTERN_SHARDED = "data/{split}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]*.*"
SPLIT_KEYWORDS = {"train": ["train", "training"], "validation": ["validation", "valid", "dev", "val"],
                  "test": ["test", "testing", "eval", "evaluation"]}
_SEP = "-._ 0-9"
_IN_FILENAME = ["**/{keyword}[{sep}]*", "**/*[{sep}]{keyword}[{sep}]*"]
_IN_DIR_NAME = ["**/{keyword}/**", "**/{keyword}[{sep}]*/**", "**/*[{sep}]{keyword}/**", "**/*[{sep}]{keyword}[{sep}]*/**"]
DEFAULT_PATTERNS_SPLIT_IN_FILENAME = {split: [p.format(keyword=k, sep=_SEP) for k in keywords for p in _IN_FILENAME]
                                      for split, keywords in SPLIT_KEYWORDS.items()}
DEFAULT_PATTERNS_SPLIT_IN_DIR_NAME = {split: [p.format(keyword=k, sep=_SEP) for k in keywords for p in _IN_DIR_NAME]
                                      for split, keywords in SPLIT_KEYWORDS.items()}
DEFAULT_PATTERNS_ALL = {"train": ["**"]}
DEFAULT_PATTERNS_LOGS = {"logs": ["**/*.eval"]}
ALL_DEFAULT_PATTERNS = [DEFAULT_PATTERNS_LOGS, DEFAULT_PATTERNS_SPLIT_IN_DIR_NAME, DEFAULT_PATTERNS_SPLIT_IN_FILENAME,
                        DEFAULT_PATTERNS_ALL]
FILES_TO_IGNORE = {"README.md", "config.json", "dataset_info.json", "dataset_infos.json", "dummy_data.zip",
                   "dataset_dict.json"}
_SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")  # datasets naming._split_re
# The text and table formats of packaged_modules._EXTENSION_TO_MODULE, by module (each also takes .zip). The media
# folders (images, audio, video, meshes, PDFs, NIfTI) are left out: no converter reads them, so a repository of media
# resolves to no file here rather than to an image data set.
MODULE_EXTENSIONS = {"csv": [".csv", ".tsv"], "json": [".json", ".jsonl", ".ndjson"],
                     "parquet": [".parquet", ".geoparquet", ".gpq"], "arrow": [".arrow"], "text": [".txt"],
                     "conll": [".conll", ".conllu"], "webdataset": [".tar"], "xml": [".xml"], "hdf5": [".hdf5", ".h5"],
                     "eval": [".eval"], "lance": [".lance"], "tsfile": [".tsfile"]}
_EXTENSION_MODULE = {ext: module for module, exts in MODULE_EXTENSIONS.items() for ext in exts}
# infer_module_for_data_files_list: the most common extension wins; on a draw this order, then the name.
_FAVOURED = (".parquet", ".lance", ".arrow", ".jsonl", ".json", ".csv")
# What read_rows below can read.
READABLE = (".jsonl", ".json", ".parquet")


def _glob_match(pattern: str, path: str) -> bool:
    """fsspec >= 2023.12's glob on a relative path (fsspec.utils.glob_translate, Python 3.13's glob.translate): `**`
    as a whole component is any number of components, none too, except last, where it is what lies below the folder
    before it (so `train.*/**` is no file named train.*); `*`, `?` and `[...]` match within one component,
    case-sensitively."""
    def match(pattern_parts: list[str], path_parts: list[str]) -> bool:
        if not pattern_parts:
            return not path_parts
        head, rest = pattern_parts[0], pattern_parts[1:]
        if head == "**" and not rest:
            return bool(path_parts)
        if head == "**":
            return any(match(rest, path_parts[i:]) for i in range(len(path_parts) + 1))
        return bool(path_parts) and fnmatchcase(path_parts[0], head) and match(rest, path_parts[1:])
    return match(pattern.split("/"), path.split("/"))


def _hidden_parts(path: str) -> int:
    return sum(1 for part in path.split("/") if part.startswith(".") and set(part) != {"."})


def resolve_pattern(pattern: str, paths: Iterable[str], extensions: Iterable[str] | None = None) -> list[str]:
    """resolve_pattern on a listing: the files the pattern matches, less README.md and the other FILES_TO_IGNORE
    (unless named), hidden files and those in hidden or `__` folders (unless the pattern names such a part), and,
    given `extensions`, files with none of them among their suffixes."""
    ignore = FILES_TO_IGNORE - {pattern.rsplit("/", 1)[-1]}
    special = sum(1 for part in pattern.split("/")[:-1] if part.startswith("__"))
    found = []
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        if name in ignore or not _glob_match(pattern, path):
            continue
        if sum(1 for part in path.split("/")[:-1] if part.startswith("__")) != special:
            continue
        if _hidden_parts(path) != _hidden_parts(pattern):
            continue
        if extensions is not None and not any("." + s in extensions for s in name.split(".")[1:]):
            continue
        found.append(path)
    return found


def split_patterns(paths: Iterable[str]) -> dict[str, list[str]]:
    """_get_data_files_patterns: each split of the repository with the patterns that make it, in the library's
    order (sharded data/<split>-NNNNN-of-NNNNN first, then folders named after splits, then file names, then every
    file as train)."""
    paths = list(paths)
    sharded = resolve_pattern(SPLIT_PATTERN_SHARDED.replace("{split}", "*"), paths)
    if sharded:
        splits = {re.match(r"^(.+)-[0-9]{5}-of-[0-9]{5}", p.rsplit("/", 1)[-1])[1] for p in sharded}
        bad = sorted(s for s in splits if not _SPLIT_NAME.match(s))
        if bad:
            raise InputError(f"split names {bad} of the sharded files are not word characters (datasets refuses them)")
        ordered = [s for s in SPLIT_KEYWORDS if s in splits] + sorted(splits - set(SPLIT_KEYWORDS))
        return {s: [SPLIT_PATTERN_SHARDED.format(split=s)] for s in ordered}
    for patterns in ALL_DEFAULT_PATTERNS:
        found = {split: ps for split, ps in patterns.items() if any(resolve_pattern(p, paths) for p in ps)}
        if found:
            return found
    return {}


def _module_files(files: list[str]) -> list[str]:
    """infer_module_for_data_files_list, then DataFilesList.filter: the files of the most common format."""
    counts: dict[str, int] = {}
    for path in files:
        for suffix in path.rsplit("/", 1)[-1].split(".")[1:]:
            counts["." + suffix.lower()] = counts.get("." + suffix.lower(), 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (item[1], *(item[0] == f for f in _FAVOURED), item[0]),
                    reverse=True)
    module = next((_EXTENSION_MODULE[ext] for ext, _ in ranked if ext in _EXTENSION_MODULE), None)
    if module is None:
        return []
    keep = re.compile(".*(" + "|".join(re.escape(e) for e in MODULE_EXTENSIONS[module] + [".zip"]) + r")(\..+)?$")
    return [path for path in files if keep.match(path)]


def split_files(paths: Iterable[str], split: str, subset: str | None = None,
                data_files: Iterable[str] = ()) -> list[str]:
    """The files of a repository listing (relative paths) that are `split`'s: those `data_files` name (shell
    patterns), else the split's by the Hub's rule; under the folder `subset` when given (datasets' data_dir)."""
    paths = sorted(paths)
    if subset:
        prefix = subset.rstrip("/") + "/"
        paths = [p[len(prefix):] for p in paths if p.startswith(prefix)]
    patterns = list(data_files) or split_patterns(paths).get(split, [])
    allowed = [ext for exts in MODULE_EXTENSIONS.values() for ext in exts] + [".zip"]
    found = sorted({path for pattern in patterns for path in resolve_pattern(pattern, paths, allowed)})
    found = _module_files(found)
    return [f"{subset.rstrip('/')}/{p}" if subset else p for p in found]


def list_files(directory: Path) -> list[str]:
    """A downloaded repository's files, relative; `hf download`'s own bookkeeping (.cache/) and gpuhosts' markers are
    not the repository's."""
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*")
                  if p.is_file() and ".cache" not in p.relative_to(directory).parts
                  and not p.name.startswith(".gpuhosts-"))


def resolve_files(directory: Path, split: str, subset: str | None, data_files: list[str]) -> list[str]:
    """The files to convert, or an InputError that names what the repository has."""
    paths = list_files(directory)
    found = split_files(paths, split, subset, data_files)
    where = f" of subset {subset}" if subset else ""
    if not found:
        if data_files:
            raise InputError(f"no file{where} matches dataFiles {' '.join(data_files)} (files: "
                             f"{', '.join(paths[:20]) or 'none'}); check the source's dataFiles")
        splits = ", ".join(split_patterns([p[len(subset) + 1:] for p in paths if p.startswith(subset + "/")]
                                          if subset else paths)) or "none"
        raise InputError(f"the download has no file of split '{split}'{where} by the Hub's rule (its splits: "
                         f"{splits}); check the source's split, subset and dataFiles")
    unreadable = [p for p in found if not p.lower().endswith(READABLE)]
    if unreadable:
        raise InputError(f"split '{split}'{where} is {', '.join(unreadable[:5])}: not .jsonl, .json or .parquet; "
                         "name readable files in dataFiles")
    return found


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


def sample_key(line: bytes) -> bytes:
    """What makes two rows the same sample: their turns' roles and texts, lower-cased with whitespace collapsed
    (a copy re-exported by another set differs in case and spacing at most), hashed."""
    row = _json(line.decode("utf-8"))
    turns = row.get("conversations") if isinstance(row, dict) else None
    if not isinstance(turns, list):
        raise InputError(f"not a converted row: {line[:80]!r}")
    normalised = [[t.get("from"), " ".join(str(t.get("value", "")).lower().split())] for t in turns
                  if isinstance(t, dict)]
    return hashlib.sha256(json.dumps(normalised, ensure_ascii=False).encode("utf-8")).digest()[:16]


def mix(spec_path: Path, out: Path) -> dict:
    """Each source's `count` distinct samples: its rows in an order seeded by the seed and its name, a row whose
    sample an earlier source (in the spec's order) or an earlier row already gave skipped as a duplicate; then the
    union shuffled with the seed."""
    seed, sources = _read_spec(spec_path)
    picked: list[tuple[int, int]] = []
    entries = []
    seen: dict[bytes, int] = {}
    handles = []
    try:
        for index, item in enumerate(sources):
            path = Path(item["converted"])
            if not path.is_file():
                raise InputError(f"source {item['name']}: converted file {path} does not exist")
            offsets = _line_offsets(path)
            if len(offsets) < item["count"]:
                raise InputError(f"source {item['name']}: {path} has {len(offsets)} rows, the mix asks for "
                                 f"{item['count']}; lower its count or convert more of it")
            # Seeded by the source's name too: reordering the spec's sources does not change the order a source's
            # rows are drawn in, only which source keeps a sample two of them share.
            random.Random(f"{seed}:{item['name']}").shuffle(offsets)
            handle = path.open("rb")
            handles.append(handle)
            kept, duplicates = [], {}
            for offset in offsets:
                if len(kept) == item["count"]:
                    break
                handle.seek(offset)
                key = sample_key(handle.readline())
                if key in seen:
                    owner = sources[seen[key]]["name"]
                    duplicates[owner] = duplicates.get(owner, 0) + 1
                    continue
                seen[key] = index
                kept.append(offset)
            dropped = sum(duplicates.values())
            if len(kept) < item["count"]:
                raise InputError(
                    f"source {item['name']}: {len(kept)} distinct samples ({dropped} of its rows repeat samples "
                    f"already taken: {', '.join(f'{n} from {o}' for o, n in duplicates.items())}); the mix asks "
                    f"for {item['count']}; lower its count to at most {len(kept)}")
            picked += [(index, offset) for offset in kept]
            entries.append({"name": item["name"], "count": item["count"], "kept": len(kept), "dropped": dropped,
                            "duplicatesOf": duplicates, "sha256": _file_sha256(path)})
        random.Random(seed).shuffle(picked)
        with _Atomic(out / "mix.jsonl") as target:
            for index, offset in picked:
                handles[index].seek(offset)
                line = handles[index].readline()
                target.write(line if line.endswith(b"\n") else line + b"\n")
    finally:
        for handle in handles:
            handle.close()
    manifest = {"seed": seed, "total": len(picked), "dropped": sum(e["dropped"] for e in entries),
                "sources": entries, "sha256": target.digest.hexdigest()}
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
    files_cmd = commands.add_parser("files", help="the files of a downloaded repository that are a split's")
    files_cmd.add_argument("--split", required=True)
    files_cmd.add_argument("--subset", default="")
    files_cmd.add_argument("--data-files", nargs="*", default=[])
    files_cmd.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "convert":
            result = convert(args.converter, args.inputs, args.out, args.source or args.out.stem)
        elif args.command == "files":
            for path in resolve_files(args.directory, args.split, args.subset or None, args.data_files):
                print(path)
            return 0
        else:
            result = mix(args.spec, args.out)
    except InputError as error:
        print(f"dataset-prepare: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, separators=(",", ":")) if args.command == "convert" else json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
