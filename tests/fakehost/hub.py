"""``hf download`` (huggingface_hub's CLI) from a registry of small fake repos, into ``--local-dir``.

The registry is ``REPOS`` merged with the host setting ``hf_repos``: {repo: {"gated": bool, "files": {name: text,
or a byte count for filler}, "revisions": [...] (optional: any revision is accepted without it)}, or null to
drop a repo}. ``--repo-type dataset`` reads the data set registry instead: the files under
``tests/fixtures/datasets/hub/<owner>/<name>/`` (a repo's ``.fakehost-repo.json``, not served, may say ``gated`` and
``revisions``) and the repos of the listings under ``tests/fixtures/hub/`` (listing_fixtures), merged with the host
setting ``hf_datasets`` in the same shape as ``hf_repos``. A token comes from ``--token``, ``HF_TOKEN``, the file ``HF_TOKEN_PATH`` names, or
``$HF_HOME/token`` (``/root/.cache/huggingface/token``), all inside the root; one starting with ``hf_`` is valid. Setting ``hf_fail_after_files: N``
breaks the N-th file fetched (left as ``.cache/huggingface/download/<file>.incomplete``). Every download appends
a line to the host's ``var/log/fakehost/hf.log``, with whether a token was sent but never the token.

The local dir's bookkeeping follows huggingface_hub v0.36.0 ``_local_folder.py``: ``<file>.metadata`` (commit, etag,
time) and the ``<file>.lock`` that guarded it, for every file checked: filelock's Unix lock is never unlinked
(filelock 4.3.1 _native/_unix.py UnixFileLock._release unlocks and closes only). Whether a file already there is
fetched again is hf's rule (``reused``); the stand-in dates what it writes, files and metadata, ``FETCHED_AT``.

``tree_entries`` is the Hub's file listing, ``GET /api/models/{repo}/tree/{revision}?recursive=true``, as
``HubApi`` serves it over HTTP to ``gpuhosts check --deep``.
"""
import hashlib
import json
import os
import re
import struct
import sys
import threading
from fnmatch import fnmatch
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from .pytools import host_path, put
from .util import Fail, root, settings, tree, unprefix, write

# what the metadata files say about when a file came, and the mtime given to the file itself: a constant, so two
# downloads give identical trees, and a file is never newer than its metadata until someone changes it
FETCHED_AT = "1767225600.0"
REQUEST_ID = "(Request ID: Root=1-6a0c0000-fakehost)"


def filler(seed: str, n: int) -> bytes:
    return hashlib.shake_256(seed.encode()).digest(n)


def safetensors(seed: str, tensors: dict) -> bytes:
    """A valid safetensors file: {tensor name: byte size} of BF16 data."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [size // 2], "data_offsets": [off, off + size]}
        off += size
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + filler(seed, off)


def _json(d) -> bytes:
    return (json.dumps(d, indent=2) + "\n").encode()


def _qwen() -> dict:
    layers = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(64)]
    text = {"model_type": "qwen3_5_text", "num_hidden_layers": 64, "layer_types": layers, "full_attention_interval": 4,
            "hidden_size": 5120, "vocab_size": 248320}
    files = {"config.json": _json({"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                                   **{k: v for k, v in text.items() if k != "model_type"}, "text_config": text,
                                   "torch_dtype": "bfloat16", "transformers_version": "4.57.1"}),
             "tokenizer.json": _json({"version": "1.0", "added_tokens": [{"id": 248070, "content": "<|mask|>"}],
                                      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})}
    weight_map, total = {}, 0
    for shard in range(1, 4):
        name = f"model-{shard:05d}-of-00003.safetensors"
        # The middle shard is larger than the three MiB a refresh samples of a weight file, so that a byte can lie
        # where only a full digest reads it.
        size = 1536 * 1024 if shard == 2 else 1024
        tensors = {f"model.language_model.layers.{i}.mlp.down_proj.weight": size for i in range(shard * 3 - 3, shard * 3)}
        files[name] = safetensors(f"Qwen/Qwen3.6-27B/{name}", tensors)
        weight_map.update(dict.fromkeys(tensors, name))
        total += sum(tensors.values())
    files["model.safetensors.index.json"] = _json({"metadata": {"total_size": total}, "weight_map": weight_map})
    return {"gated": False, "files": files}


def _dflash() -> dict:
    return {"gated": True, "files": {
        "config.json": _json({"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "num_hidden_layers": 5,
                              "dflash_config": {"target_layer_ids": [1, 16, 31, 46, 61], "block_size": 16,
                                                # Public copies of z-lab/Qwen3.6-27B-DFlash's config.json.
                                                "mask_token_id": 248070},
                              "layer_types": ["sliding_attention"] * 4 + ["full_attention"], "sliding_window": 2048,
                              "use_sliding_window": True, "hidden_size": 5120, "torch_dtype": "bfloat16"}),
        "model.safetensors": safetensors("z-lab/Qwen3.6-27B-DFlash/model.safetensors",
                                         {f"layers.{i}.mlp.down_proj.weight": 1024 for i in range(5)})}}


REPOS = {"Qwen/Qwen3.6-27B": _qwen, "z-lab/Qwen3.6-27B-DFlash": _dflash}
DATASETS = Path(__file__).resolve().parent.parent / "fixtures/datasets/hub"
REPO_FILE = ".fakehost-repo.json"


LISTINGS = Path(__file__).resolve().parent.parent / "fixtures/hub"


def listing_fixtures() -> dict:
    """The data set repos of tests/fixtures/hub: one `<owner>+<name>@<commit>.json` each, the Hub's tree listing of
    the repository at that commit (GET /api/datasets/{repo}/tree/{revision}), served at that commit only and with
    exactly those paths. What a file holds is tests/fixtures/hub/files/<owner>+<name>/<path> where the tests give
    it, else a short stand-in (the real files are gigabytes; the layout is what is simulated)."""
    repos = {}
    for listing in sorted(LISTINGS.glob("*@*.json")):
        slug, revision = listing.stem.rsplit("@", 1)
        repo = slug.replace("+", "/", 1)
        content = LISTINGS / "files" / slug
        files = {}
        for item in json.loads(listing.read_text()):
            if item["type"] != "file":
                continue
            given = content / item["path"]
            files[item["path"]] = given.read_bytes() if given.is_file() else (
                f"# {repo}\n\nStand-in of the dataset card.\n".encode() if item["path"] == "README.md"
                else filler(f"{repo}@{revision}/{item['path']}", 64))
        entry = repos.setdefault(repo, {"gated": False, "revisions": [], "files": {}})
        if entry["files"] and entry["files"] != files:
            raise ValueError(f"{listing.name}: two listings of {repo} with different files are not simulated")
        entry["revisions"].append(revision)
        entry["files"] = files
    return repos


def dataset_fixtures() -> dict:
    """The data set repos of tests/fixtures/datasets/hub (every directory two levels down is one repo) and of the
    listings of tests/fixtures/hub."""
    repos = listing_fixtures()
    for repo_dir in sorted(p for p in DATASETS.glob("*/*") if p.is_dir()):
        meta = repo_dir / REPO_FILE
        entry = json.loads(meta.read_text()) if meta.is_file() else {}
        files = {f.relative_to(repo_dir).as_posix(): f.read_bytes() for f in sorted(repo_dir.rglob("*"))
                 if f.is_file() and f.name != REPO_FILE}
        repos[repo_dir.relative_to(DATASETS).as_posix()] = {**entry, "files": files}
    return repos


# Files a Hub repo keeps in LFS by its default .gitattributes; the others are plain git blobs.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf")


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def etag(name: str, data: bytes) -> str:
    """What the Hub answers as a file's ETag, and the local dir's metadata records: the sha256 of an LFS file, the
    git blob hash of any other (huggingface_hub v0.36.0 _local_folder.py LocalDownloadFileMetadata.etag)."""
    if name.endswith(LFS_SUFFIXES):
        return hashlib.sha256(data).hexdigest()
    return git_blob(data)


def lfs_pointer(data: bytes) -> bytes:
    """The pointer git keeps for an LFS file (git-lfs docs/spec.md: version, oid, size, each a line)."""
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n").encode()


def tree_entries(entry: dict) -> list:
    """What the Hub lists of a repo at a revision (GET /api/models/{repo}/tree/{revision}?recursive=true, read by
    huggingface_hub v0.36.0 hf_api.py `list_repo_tree` into `RepoFile`: `path`, `size`, `oid` the git blob id,
    and for an LFS file `lfs` with `oid` its sha256, `size` and `pointerSize`; folders as type "directory")."""
    out, folders = [], set()
    for name in sorted(entry["files"]):
        data = entry["files"][name]
        parts = name.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            if folder not in folders:
                folders.add(folder)
                out.append({"type": "directory", "oid": git_blob(folder.encode()), "size": 0, "path": folder})
        if name.endswith(LFS_SUFFIXES):
            pointer = lfs_pointer(data)
            out.append({"type": "file", "oid": git_blob(pointer), "size": len(data), "path": name,
                        "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                "pointerSize": len(pointer)}})
        else:
            out.append({"type": "file", "oid": git_blob(data), "size": len(data), "path": name})
    return out


def commit_of(repo: str, rev: str) -> str:
    return rev if re.fullmatch(r"[0-9a-f]{40}", rev) else hashlib.sha1(f"{repo}@{rev}".encode()).hexdigest()


def local_metadata(cache: Path, name: str, dst: Path):
    """(commit, etag) of a file's metadata while it still speaks for the file, else None: gone, unreadable, or
    older than the file by more than a second, i.e. the file changed after hf wrote it (huggingface_hub v0.36.0
    _local_folder.py `read_download_metadata`)."""
    meta = cache / "download" / (name + ".metadata")
    try:
        commit, tag, stamp = meta.read_text().splitlines()[:3]
        return (commit, tag) if dst.stat().st_mtime - 1 <= float(stamp) else None
    except (OSError, ValueError):
        return None


def reused(cache: Path, name: str, dst: Path, rev: str, tag: str) -> bool:
    """Whether `hf download` keeps the file already in the local dir (huggingface_hub v0.36.0 file_download.py
    `_hf_hub_download_to_local_dir`): its metadata names the commit asked for; or its metadata's etag is the
    Hub's; or, the metadata gone or outdated, the etag is a sha256 and the file hashes to it. Its content is
    otherwise never compared: a byte changed in place without a newer mtime is kept."""
    if not dst.is_file() or dst.is_symlink():
        return False
    meta = local_metadata(cache, name, dst)
    if meta is not None:
        return (re.fullmatch(r"[0-9a-f]{40}", rev) is not None and meta[0] == rev) or meta[1] == tag
    return len(tag) == 64 and hashlib.sha256(dst.read_bytes()).hexdigest() == tag


def registry(repo_type: str = "model") -> dict:
    return merged(dataset_fixtures() if repo_type == "dataset" else {name: make() for name, make in REPOS.items()},
                  settings().get("hf_datasets" if repo_type == "dataset" else "hf_repos", {}))


def merged(repos: dict, overrides: dict) -> dict:
    for name, entry in overrides.items():
        if entry is None:
            repos.pop(name, None)
            continue
        files = {f: filler(f"{name}/{f}", c) if isinstance(c, int) else c.encode() for f, c in entry["files"].items()}
        repos[name] = {**entry, "files": files}
    return repos


def token(explicit):
    if explicit or os.environ.get("HF_TOKEN"):
        return explicit or os.environ["HF_TOKEN"]
    home = os.environ.get("HF_HOME") or "/root/.cache/huggingface"
    path = host_path(os.environ.get("HF_TOKEN_PATH") or f"{home}/token")
    return (path.read_text().splitlines() or [""])[0].strip() if path.is_file() else None


def parse(argv):
    if argv[:1] != ["download"] or len(argv) < 2:
        raise Fail("usage: hf download [-h] [--repo-type {model,dataset,space}] [--revision REVISION] [--include "
                   "[INCLUDE ...]] [--exclude [EXCLUDE ...]] [--local-dir LOCAL_DIR] [--token TOKEN] [--quiet] "
                   "repo_id [filenames ...]\nfakehost: only `hf download` is simulated", 2)
    a = {"revision": "main", "repo_type": "model", "local_dir": None, "token": None, "quiet": False, "include": [], "exclude": [],
         "words": []}
    it, current = iter(argv[1:]), None
    for w in it:
        if w in ("--include", "--exclude"):
            current = a[w[2:]]
        elif w in ("--revision", "--local-dir", "--token", "--repo-type", "--cache-dir", "--max-workers"):
            a[w[2:].replace("-", "_")] = next(it, None)
            current = None
        elif w == "--quiet":
            a["quiet"] = True
        elif w.startswith("--"):
            current = None
        else:
            (current if current is not None else a["words"]).append(w)
    if not a["words"]:
        raise Fail("hf download: error: the following arguments are required: repo_id", 2)
    if not a["local_dir"]:
        raise Fail("fakehost: hf download without --local-dir (the HF cache) is not simulated", 2)
    if a["repo_type"] not in ("model", "dataset", "space"):
        raise Fail(f"hf download: error: argument --repo-type: invalid choice: '{a['repo_type']}' (choose from "
                   "'model', 'dataset', 'space')", 2)
    if a["repo_type"] == "space":
        raise Fail("fakehost: space repos are not simulated", 2)
    return a


def cmd_hf(argv):
    a = parse(argv)
    repo, rev, files_wanted = a["words"][0], a["revision"], a["words"][1:]
    tok, ldir = token(a["token"]), host_path(a["local_dir"])
    kind = a["repo_type"]
    # The Hub's API and file URLs of a data set carry its type (huggingface_hub constants REPO_TYPES_URL_PREFIXES).
    api = f"https://huggingface.co/api/{kind}s/{repo}/revision/{rev}"
    prefix = "datasets/" if kind == "dataset" else ""
    fetched = kept = 0
    rc = 1
    try:
        if tok and not tok.startswith("hf_"):
            raise Fail(f"huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: {api} "
                       f"{REQUEST_ID}\n\nInvalid credentials in Authorization header", 1)
        entry = registry(kind).get(repo)
        if entry is None:
            raise Fail(f"huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. {REQUEST_ID}\n\n"
                       f"Repository Not Found for url: {api}.\nPlease make sure you specified the correct `repo_id` "
                       f"and `repo_type`.\nIf you are trying to access a private or gated repo, make sure you are "
                       f"authenticated. For more details, see https://huggingface.co/docs/huggingface_hub/authentication", 1)
        if entry.get("revisions") and rev not in entry["revisions"]:
            raise Fail(f"huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. {REQUEST_ID}\n\n"
                       f"Revision Not Found for url: {api}.\nInvalid rev id: {rev}", 1)
        # Named files win over --include/--exclude, which `hf download` then ignores with a warning
        # (huggingface_hub v0.36.0 cli/download.py DownloadCommand._download).
        include, exclude = (files_wanted, []) if files_wanted else (a["include"], a["exclude"])
        if files_wanted and not a["quiet"] and (a["include"] or a["exclude"]):
            print("UserWarning: Ignoring `--include` since filenames have being explicitly set.", file=sys.stderr)
        names = [n for n in sorted(entry["files"]) if (not include or any(fnmatch(n, p) for p in include))
                 and not any(fnmatch(n, p) for p in exclude)]
        if entry.get("gated") and not tok:
            raise Fail(f"huggingface_hub.errors.GatedRepoError: 401 Client Error. {REQUEST_ID}\n\nCannot access gated "
                       f"repo for url https://huggingface.co/{prefix}{repo}/resolve/{rev}/{(names or ['config.json'])[0]}.\n"
                       f"Access to {kind} {repo} is restricted. You must have access to it and be authenticated to "
                       f"access it. Please log in.", 1)
        commit = commit_of(repo, rev)
        cache = ldir / ".cache/huggingface"
        put(cache / ".gitignore", "*")
        fail_after = settings().get("hf_fail_after_files")
        if not a["quiet"]:
            print(f"Fetching {len(names)} files", file=sys.stderr)
        for name in names:
            data, dst = entry["files"][name], ldir / name
            # get_local_download_paths: the lock is the metadata path with its suffix swapped; WeakFileLock takes it
            # to read the metadata before anything is fetched, so a reused or a cut-off file has one too.
            put(cache / "download" / (name + ".lock"), b"")
            partial = cache / "download" / (name + ".incomplete")
            if reused(cache, name, dst, rev, etag(name, data)):
                kept += 1
            else:
                if fail_after and fetched + 1 >= fail_after:
                    write(partial, data[:len(data) // 2])
                    raise Fail("requests.exceptions.ChunkedEncodingError: ('Connection broken: ConnectionResetError"
                               "(104, 'Connection reset by peer')', ConnectionResetError(104, 'Connection reset by "
                               "peer'))", 1)
                write(partial, data)
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(partial, dst)
                fetched += 1
            os.utime(dst, (float(FETCHED_AT), float(FETCHED_AT)))
            put(cache / "download" / (name + ".metadata"), f"{commit}\n{etag(name, data)}\n{FETCHED_AT}\n")
        # one named file goes through hf_hub_download, which answers the file's path; anything else through
        # snapshot_download, which answers the folder (cli/download.py DownloadCommand._download)
        print(f"{a['local_dir'].rstrip('/')}/{files_wanted[0]}" if len(files_wanted) == 1 else a["local_dir"])
        rc = 0
    except Fail as e:
        rc = e.code
        raise
    finally:
        log = tree() / "var/log/fakehost/hf.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(f"download {repo}@{rev} -> {unprefix(str(ldir), root())} fetched={fetched} reused={kept} "
                    f"token={'yes' if tok else 'no'} rc={rc}" + (f" type={kind}" if kind != "model" else "") + "\n")


class HubApi:
    """The Hub's file listing over HTTP for one simulated host's registry (its ``hf_repos`` included), as
    `gpuhosts check --deep` reads it from ``HF_ENDPOINT``: ``GET /api/models/{repo}/tree/{revision}`` answers the
    JSON list ``tree_entries`` gives, in one page (no ``Link`` header); an unknown repo or revision answers 404 with
    the ``X-Error-Code`` the Hub sends (RepoNotFound, RevisionNotFound: huggingface_hub v0.36.0 utils/_http.py
    `hf_raise_for_status`). Every request is kept in ``requests``, with whether it carried a token."""

    def __init__(self, host_tree: Path):
        self.tree, self.requests = Path(host_tree), []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlsplit(self.path)
                api.requests.append((url.path, parse_qs(url.query), bool(self.headers.get("Authorization"))))
                match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", url.path)
                if not match:
                    return self.answer(404, {"error": "Not Found"}, "EntryNotFound")
                repo, rev = unquote(match[1]), unquote(match[2])
                entry = registry_of(api.tree).get(repo)
                if entry is None:
                    return self.answer(404, {"error": "Repository not found"}, "RepoNotFound")
                known = entry.get("revisions")
                if known and rev not in known and rev not in {commit_of(repo, r) for r in known}:
                    return self.answer(404, {"error": f"Invalid rev id: {rev}"}, "RevisionNotFound")
                self.answer(200, tree_entries(entry))

            def answer(self, status, body, code=None):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if code:
                    self.send_header("X-Error-Code", code)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def registry_of(host_tree: Path) -> dict:
    """The model registry a simulated host's `hf` downloads from, read from outside it (its settings file)."""
    return merged({name: make() for name, make in REPOS.items()}, settings(host_tree).get("hf_repos", {}))
