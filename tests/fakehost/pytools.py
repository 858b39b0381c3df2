"""Python inside a container: its ``/usr/bin/python3``, venvs, pip, uv and the engines' entry points.

A venv is a directory with ``pyvenv.cfg``, ``bin/python`` (+ ``bin/python3``) and, per installed distribution, the
``.dist-info`` directory an installer leaves in its ``lib/pythonX.Y/site-packages`` (``dist_info``): what is
installed is read back from those alone, as uv and pip read it. Programs a package brings (``uv``, ``hf``, ``vllm``) appear in its
``bin/`` as stand-ins. Stand-ins inside the tree call ``fakehost.cli`` through PYTHONPATH (set by ``host_env``),
so the tree names no path of the checkout and a copied tree still works. Whatever a venv's python runs other than
``-m pip`` / ``-m venv`` / ``-m uv`` runs on the test interpreter itself: the engines are not installed for real.

Settings knobs: ``uv_fail_install`` (true, or a list of package names) and ``pip_fail_install`` make installs
fail as without network, before anything is recorded. ``real_packages`` ({name: site-packages of a real
installation}) makes a venv's python import that distribution for real when the venv holds it at the installed
version (the model gateway smg, whose Rust router the rollout tests run in front of the engine stand-ins).
"""
import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

from .util import configure, Fail, root, settings, tree, unprefix, write

SYSTEM_PYTHON = "3.11.2"  # Debian 12
PYTHONS = {"3": SYSTEM_PYTHON, "3.11": SYSTEM_PYTHON, "3.12": "3.12.11", "3.13": "3.13.7"}
VENV_SEED = {"pip": "23.0.1", "setuptools": "66.1.1"}  # what Debian 12's ensurepip puts into a venv
UV_SEED = {"pip": "25.2"}
ENGINE_DEPS = {"huggingface-hub": "0.36.0", "prometheus-client": "0.23.1"}
ENTRY_POINTS = {"uv": "uv", "huggingface-hub": "hf", "vllm": "vllm", "torch": "torchrun", "speculators": "speculators"}
# speculators trains with torch (torchrun) and downloads with huggingface_hub, like the engines.
TRAINER_DEPS = {"torch": "2.9.0"}
# options of pip / uv pip that take a value: their value is no requirement
VALUE_OPTS = {"-p", "--python", "-i", "--index-url", "--extra-index-url", "--index", "--default-index", "-f",
              "--find-links", "-r", "--requirement", "-c", "--constraint", "--constraints", "--override",
              "--overrides", "--torch-backend", "--index-strategy", "--prerelease", "--resolution", "--target",
              "--prefix", "--python-version", "--python-platform", "--prompt", "--cache-dir", "--only-binary"}


def stub(prog: str, what: str) -> str:
    return (f"#!/usr/bin/env python3\n# {what} on a simulated host (see tests/fakehost); host_env puts tests/ on "
            f"PYTHONPATH.\nimport sys\nfrom fakehost.cli import main\nsys.exit(main({prog!r}, sys.argv[1:]))\n")


def put(path: Path, data, mode=0o644):
    """Writes only what differs: a repeated install leaves files, and so digests and mtimes, as they were."""
    data = data.encode() if isinstance(data, str) else data
    if path.is_symlink() or not path.is_file() or path.read_bytes() != data:
        if path.is_symlink():
            path.unlink()
        write(path, data)
    if path.stat().st_mode & 0o7777 != mode:
        path.chmod(mode)


def put_link(path: Path, target: str):
    if path.is_symlink() and os.readlink(path) == target:
        return
    if path.is_symlink() or path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def host_path(p: str) -> Path:
    """A path as a program running in the simulated root means it: already under the root, or inside it."""
    r, a = str(root()).rstrip("/"), os.path.abspath(p)
    return Path(a if a == r or a.startswith(r + "/") else r + a)


def here() -> Path:
    """The venv whose stand-in is running (bin/<prog> -> the venv); not resolved: bin/python3 links to python."""
    return Path(os.path.abspath(sys.argv[0])).parent.parent


# A program named in the host setting `virtual_clock` runs on a clock of its own: a sleep returns at once and moves
# the clock on by what it asked for, so a wait that gives up after N seconds gives up after N of its seconds,
# whatever the machine's speed, and no test waits them out.
VIRTUAL_CLOCK = """import os, runpy, sys, time
ahead = [0.0]
real_sleep, real_monotonic, real_time, real_perf = time.sleep, time.monotonic, time.time, time.perf_counter
def sleep(seconds):
    ahead[0] += max(float(seconds), 0.0)
    real_sleep(0)
time.sleep = sleep
time.monotonic = lambda: real_monotonic() + ahead[0]
time.time = lambda: real_time() + ahead[0]
time.perf_counter = lambda: real_perf() + ahead[0]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def exec_real(argv):
    sys.stdout.flush()
    if argv and not argv[0].startswith("-") and os.path.basename(argv[0]) in (settings().get("virtual_clock") or []):
        os.execv(sys.executable, [sys.executable, "-c", VIRTUAL_CLOCK, *argv])
    os.execv(sys.executable, [sys.executable, *argv])


def options(args):
    """(options {name: value or True}, positional words) of a pip/uv command line."""
    opts, words, it = {}, [], iter(args)
    for a in it:
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            opts[k] = v
        elif a in VALUE_OPTS:
            opts[a] = next(it, "")
        elif a.startswith("-") and a != "-":
            opts[a] = True
        else:
            words.append(a)
    return opts, words


# ---- venvs ----------------------------------------------------------------------------------------------

def venv_python(venv: Path) -> str:
    """X.Y of the venv's Python, from its pyvenv.cfg (uv writes version_info, the venv module version)."""
    cfg = venv / "pyvenv.cfg"
    lines = cfg.read_text().splitlines() if cfg.is_file() else []
    values = dict(line.split(" = ", 1) for line in lines if " = " in line)
    return ".".join(values.get("version_info", values.get("version", SYSTEM_PYTHON)).split(".")[:2])


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{venv_python(venv)}" / "site-packages"


# What an installer records of each distribution ("Recording installed projects", the PyPA specification of PEP 376
# as amended by PEP 627): a `{name}-{version}.dist-info` directory beside the importable packages, name and version
# normalised with `-` written `_`, holding METADATA (core metadata: `Name:` as the project spells it, `Version:`),
# INSTALLER (the tool's name), RECORD (every file of it as `path,sha256=<urlsafe base64, no padding>,size`, RECORD
# itself with neither) and, for a distribution installed from a URL, direct_url.json (PEP 610, "Direct URL Data
# Structure": `url` without the `git+` prefix or the revision, `vcs_info` with `vcs`, `requested_revision` and
# `commit_id`).
def dist_info_name(name: str, version: str) -> str:
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version.replace('-', '_')}.dist-info"


def direct_url(url: str) -> dict:
    if not url.startswith("git+"):
        return {"url": url, "archive_info": {}}
    location = url[len("git+"):].split("#", 1)[0]
    scheme, _, rest = location.partition("://")
    host, _, path = rest.partition("/")
    path, at, revision = path.partition("@")
    vcs = {"vcs": "git", "commit_id": revision if re.fullmatch(r"[0-9a-f]{40}", revision)
           else hashlib.sha1(url.encode()).hexdigest()}
    if at:
        vcs["requested_revision"] = revision
    return {"url": f"{scheme}://{host}/{path}", "vcs_info": vcs}


def url_of(record: dict) -> str:
    """The requirement's URL again from a direct_url.json."""
    vcs = record.get("vcs_info")
    if not vcs:
        return record["url"]
    revision = vcs.get("requested_revision")
    return f"git+{record['url']}" + (f"@{revision}" if revision else "")


def dist_info(site: Path, spelled: str, entry: dict, installer: str) -> None:
    d = site / dist_info_name(spelled, entry["version"])
    files = {"METADATA": f"Metadata-Version: 2.1\nName: {spelled}\nVersion: {entry['version']}\n",
             "INSTALLER": installer + "\n"}
    if "url" in entry:
        files["direct_url.json"] = json.dumps(direct_url(entry["url"]), separators=(",", ":"))
    record = []
    for name, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{d.name}/{name},sha256={digest},{len(data)}\n")
        put(d / name, data)
    put(d / "RECORD", "".join(record) + f"{d.name}/RECORD,,\n")


def installed(venv: Path) -> dict:
    """{normalised name: (its .dist-info directory, {"version", "url"?})} of what the venv's site-packages holds."""
    found = {}
    for metadata in sorted(venv.glob("lib/python*/site-packages/*.dist-info/METADATA")):
        headers = metadata.read_text().split("\n\n", 1)[0]
        fields = dict(line.split(": ", 1) for line in headers.splitlines() if ": " in line)
        if "Name" not in fields or "Version" not in fields:
            continue
        entry = {"version": fields["Version"]}
        url = metadata.parent / "direct_url.json"
        if url.is_file():
            entry["url"] = url_of(json.loads(url.read_text()))
        found[norm(fields["Name"])] = (metadata.parent, entry)
    return found


def packages(venv: Path) -> dict:
    return {name: entry for name, (_, entry) in installed(venv).items()}


def save(venv: Path, pk: dict, spelling: dict | None = None, installer: str = "uv"):
    """The venv holds exactly `pk`: a distribution whose version or URL changed gets a new .dist-info, one not in
    `pk` loses its own; an unchanged one is left as it is (its files, digests and mtimes)."""
    site = site_packages(venv)
    have = installed(venv)
    for name, (directory, entry) in have.items():
        if pk.get(name) != entry:
            shutil.rmtree(directory)
    for name, entry in pk.items():
        if have.get(name, (None, None))[1] != entry:
            dist_info(site, (spelling or {}).get(name, name), entry, installer)
    for name, prog in ENTRY_POINTS.items():
        if name in pk:
            put(venv / "bin" / prog, stub(prog, f"{prog} from {name}"), 0o755)


def make_venv(venv: Path, cfg: dict, seed: dict, clear=False, installer="pip"):
    if clear and venv.is_dir():
        for p in venv.iterdir():  # --clear empties the directory, the directory itself stays
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    put(venv / "pyvenv.cfg", "".join(f"{k} = {v}\n" for k, v in cfg.items()))
    put(venv / "bin/python", stub("venv-python", "A venv's python"), 0o755)
    put_link(venv / "bin/python3", "python")
    save(venv, {**{n: {"version": v} for n, v in seed.items()}, **packages(venv)}, installer=installer)


def python_m_venv(args, python: str) -> int:
    opts, dirs = options(args)
    if not dirs:
        raise Fail("usage: venv [-h] [--system-site-packages] [--symlinks | --copies] [--clear] [--upgrade] "
                   "[--without-pip] [--prompt PROMPT] [--upgrade-deps] ENV_DIR [ENV_DIR ...]\n"
                   "venv: error: the following arguments are required: ENV_DIR", 2)
    for d in dirs:
        v = host_path(d)
        make_venv(v, {"home": "/usr/bin", "include-system-site-packages": "false", "version": SYSTEM_PYTHON,
                      "executable": "/usr/bin/python3.11", "command": f"{python} -m venv {unprefix(str(v))}"},
                  {} if "--without-pip" in opts else VENV_SEED, clear="--clear" in opts)
    return 0


def cmd_python3(argv):
    """The container's /usr/bin/python3."""
    if argv[:2] == ["-m", "venv"]:
        return python_m_venv(argv[2:], "/usr/bin/python3")
    if argv[:1] == ["-c"] and argv[1:2] and argv[1].strip() == "import ensurepip":
        return 0  # python3-venv is installed in this container
    exec_real(argv)


def cmd_venv_python(argv):
    venv = here()
    if argv[:2] == ["-m", "venv"]:
        return python_m_venv(argv[2:], unprefix(str(venv / "bin/python")))
    if argv[:2] == ["-m", "pip"]:
        return pip(venv, argv[2:])
    if argv[:2] == ["-m", "uv"] and "uv" in packages(venv):
        return cmd_uv(argv[2:], venv)
    if argv[:1] == ["-m"] and argv[1:2] and argv[1] in ("pip", "uv"):
        raise Fail(f"{unprefix(str(venv))}/bin/python: No module named {argv[1]}", 1)
    if argv[:1] == ["-c"] and argv[1:2] and "from speculators.convert import convert_model" in argv[1]:
        if "speculators" not in packages(venv):
            raise Fail("ModuleNotFoundError: No module named 'speculators'", 1)
        # `python -c CODE MODEL VERIFIER ALGORITHM OUTPUT` (gpuhosts' call of convert_model for speculators 0.7.x)
        model, verifier, algorithm, output = argv[2:6]
        return convert_model(model, verifier, algorithm, output)
    if argv[:1] and argv[0].endswith("/scripts/prepare_data.py"):
        if "speculators" not in packages(venv):
            raise Fail("ModuleNotFoundError: No module named 'speculators'", 1)
        return prepare_data(argv[1:])
    if "sglang" in packages(venv):
        from .engines import ENGINE_MODULES, serving
        if serving():
            # the launcher gpuhosts installs ends in runpy.run_module("sglang.launch_server"): the stand-in module
            os.environ["PYTHONPATH"] = ":".join([str(ENGINE_MODULES), *filter(None, [os.environ.get("PYTHONPATH")])])
    real = real_packages(venv)
    if real:
        os.environ["PYTHONPATH"] = ":".join([*real, *filter(None, [os.environ.get("PYTHONPATH")])])
    exec_real(argv)


def real_packages(venv: Path) -> list:
    """The site-packages of real installations (host setting ``real_packages``: {name: site-packages}) that the
    venv's python imports from, one per distribution the venv holds at the version installed there. A venv without
    the distribution, or holding another version, finds none of it: the import then fails as it would."""
    found = []
    have = packages(venv)
    for name, site in sorted((settings().get("real_packages") or {}).items()):
        entry = have.get(norm(name))
        if entry is None:
            continue
        if not (Path(site) / dist_info_name(name, entry["version"])).is_dir():
            raise Fail(f"fakehost: real_packages[{name!r}] at {site} is not {name} {entry['version']}, the version "
                       f"{unprefix(str(venv))} holds", 1)
        found.append(str(site))
    return found


# ---- requirements ---------------------------------------------------------------------------------------

def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_spec(spec: str):
    """``name==v``, ``name[extra]==v``, ``name>=v``, ``name``, ``name @ git+https://…@REF`` -> (name, entry).
    Extras select dependencies; the installed distribution does not record them."""
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*(.*?)\s*", spec)
    if not m:
        raise Fail(f"error: Failed to parse: `{spec}`", 2)
    name, rest = norm(m.group(1)), m.group(3)
    entry = {}
    if rest.startswith("@"):
        url = rest[1:].strip()
        ref = re.search(r"@([^@/]+)$", url.split("#")[0])
        ref = ref.group(1) if ref else "head"
        entry.update(version="0.0.0+g" + re.sub(r"[^a-z0-9]+", ".", ref.lower()).strip(".")[:12], url=url)
    elif (v := re.match(r"(?:===?|>=|~=)\s*([^\s,;]+)", rest)) or not rest:
        entry["version"] = v.group(1) if v else "1.0.0"
    else:
        raise Fail(f"error: Failed to parse: `{spec}`", 2)
    return name, entry


def spellings(specs) -> dict:
    """{normalised name: the name as the requirement spells it}: what the distribution's METADATA then says."""
    return {norm(m.group(1)): m.group(1) for s in specs
            if (m := re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", s))}


def requirement_lines(text: str) -> list:
    """[(spec, [hashes])] of a requirements file: backslash continues a line, `#` starts a comment, `--hash=` options
    belong to their requirement (pip's and uv's requirements.txt format); other option lines are skipped."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
        if not line or line.startswith("-"):
            continue
        hashes = re.findall(r"--hash=(\S+)", line)
        spec = re.sub(r"\s*--hash=\S+", "", line).strip()
        out.append((spec, hashes))
    return out


def requirement_entries(opts, words, files=()) -> list:
    """[(spec, [hashes])] from the command line's words, its `-r` file and `files` (pip sync's SRC_FILEs)."""
    entries = [(w, []) for w in words]
    for path in [*(opts[k] for k in ("-r", "--requirement") if k in opts), *files]:
        entries += requirement_lines(host_path(path).read_text())
    return entries


def requirements(opts, words) -> list:
    return [spec for spec, _ in requirement_entries(opts, words)]


def check_hashes(entries):
    """uv's hash-checking mode (`--require-hashes`, docs: uv pip install / pip sync "--require-hashes"): every
    requirement pinned with `==` and carrying a hash, refused before anything is fetched (status 2)."""
    for spec, hashes in entries:
        if not re.search(r"@|===?", spec) or re.search(r">=|<=|~=|!=|[<>]", spec):
            raise Fail("error: In `--require-hashes` mode, all requirements must have their versions pinned with "
                       f"`==`, but found: {spec}", 2)
        if not hashes:
            raise Fail("error: In `--require-hashes` mode, all requirements must have a hash, but none were "
                       f"provided for: {spec}", 2)


def dependencies(name: str) -> dict:
    """What installing ``name`` brings along beside it: {package: version}."""
    if name in ("sglang", "vllm", "speculators"):
        return {**ENGINE_DEPS, **(TRAINER_DEPS if name == "speculators" else {})}
    return {}


def check_dependencies_hashed(specs):
    """In hash-checking mode the resolver may only pick what the requirements pinned and hashed upfront: a
    dependency they leave out is refused before anything is fetched (uv 0.12.5 crates/uv-resolver/src/error.rs
    ResolveError::UnhashedPackage, raised by resolver/mod.rs; crates/uv/tests/it/pip_install.rs
    require_hashes_missing_dependency)."""
    named = {parse_spec(s)[0] for s in specs}
    missing = sorted({d for n in named for d in dependencies(n)} - named)
    if missing:
        raise Fail("error: In `--require-hashes` mode, all requirements must be pinned upfront with `==`, but "
                   f"found: `{missing[0]}`", 2)


def failing(knob: str, names) -> str | None:
    want = settings().get(knob)
    return next((n for n in names if want is True or (isinstance(want, list) and n in want)), None)


def install(venv: Path, specs, deps=True, installer="uv") -> list:
    """Records the packages; answers [(name, old entry or None, new entry)] for what changed. Without `deps`
    (`--no-deps`, a lock's pins) only the named packages."""
    parsed = [parse_spec(s) for s in specs]
    pk, changes = packages(venv), []
    named = {n for n, _ in parsed}
    for name, entry in parsed:
        todo = [(name, entry)]
        if deps:
            todo += [(n, {"version": v}) for n, v in dependencies(name).items() if n not in pk and n not in named]
        for n, e in todo:
            if pk.get(n) != e:
                changes.append((n, pk.get(n), e))
                pk[n] = e
    save(venv, pk, spellings(specs), installer)
    return changes


def show(name, e) -> str:
    return f"{name} @ {e['url']}" if "url" in e else f"{name}=={e['version']}"


# ---- pip ------------------------------------------------------------------------------------------------

def pip(venv: Path, args) -> int:
    have = packages(venv)
    if "pip" not in have:
        raise Fail(f"{unprefix(str(venv))}/bin/python: No module named pip", 1)
    if args[:1] == ["--version"]:
        print(f"pip {have['pip']['version']} from {venv}/lib/python3.11/site-packages/pip (python 3.11)")
        return 0
    if args[:1] != ["install"]:
        raise Fail(f"fakehost: `pip {' '.join(args[:1])}` is not simulated", 2)
    opts, words = options(args[1:])
    entries = requirement_entries(opts, words)
    specs = [spec for spec, _ in entries]
    if not specs:
        raise Fail("ERROR: You must give at least one requirement to install (see \"pip help install\")", 1)
    if "--require-hashes" in opts:
        # pip's hash-checking mode (pip 25 user guide, "Secure installs"): every requirement pinned with == and
        # hashed, else pip refuses before it downloads anything; uv's wording is the one check_hashes prints
        check_hashes(entries)
    quiet = bool({"-q", "--quiet"} & set(opts))
    if (bad := failing("pip_fail_install", [parse_spec(s)[0] for s in specs])):
        spec = next(s for s in specs if parse_spec(s)[0] == bad)
        raise Fail(f"ERROR: Could not find a version that satisfies the requirement {spec} (from versions: none)\n"
                   f"ERROR: No matching distribution found for {spec}", 1)
    changes = install(venv, specs, installer="pip")
    if not quiet:
        changed = {n for n, _, _ in changes}
        for s in specs:
            n, e = parse_spec(s)
            print(f"Collecting {s}" if n in changed else
                  f"Requirement already satisfied: {s} in ./lib/python3.11/site-packages ({e['version']})")
        if changes:
            print("Installing collected packages: " + ", ".join(n for n, _, _ in changes))
            print("Successfully installed " + " ".join(f"{n}-{e['version']}" for n, _, e in changes))
    return 0


# ---- uv -------------------------------------------------------------------------------------------------

GLOBAL_FLAGS = {"-q", "--quiet", "-v", "--verbose", "--no-progress", "--offline", "--native-tls", "--no-cache", "-n"}
GLOBAL_VALUES = {"--color", "--cache-dir", "--directory", "--project", "--config-file"}


def cmd_uv(argv, venv=None):
    venv = venv or here()
    version = packages(venv).get("uv", {}).get("version", "0.0.0")
    quiet = False
    while argv and (argv[0] in GLOBAL_FLAGS or argv[0] in GLOBAL_VALUES or argv[0].split("=")[0] in GLOBAL_VALUES):
        quiet = quiet or argv[0] in ("-q", "--quiet")
        argv = argv[2:] if argv[0] in GLOBAL_VALUES else argv[1:]
    if argv[:1] in (["--version"], ["-V"]) or argv[:2] == ["self", "version"]:
        print(f"uv {version}")
        return 0
    if argv[:1] == ["venv"]:
        return uv_venv(argv[1:] + ["--quiet"] * quiet, version)
    if argv[:2] in (["pip", "install"], ["pip", "sync"], ["pip", "show"], ["pip", "freeze"]):
        opts, words = options(argv[2:])
        target = uv_target(opts)
        quiet = quiet or bool({"-q", "--quiet"} & set(opts))
        if argv[1] in ("install", "sync"):
            sync = argv[1] == "sync"
            entries = requirement_entries(opts, [] if sync else words, words if sync else ())
            if "--require-hashes" in opts:
                check_hashes(entries)
            specs = [spec for spec, _ in entries]
            if sync:
                return uv_sync(target, specs, quiet=quiet)
            deps = "--no-deps" not in opts
            if "--require-hashes" in opts and deps:
                check_dependencies_hashed(specs)
            return uv_install(target, specs, quiet=quiet, deps=deps)
        return uv_show(target, words) if argv[1] == "show" else uv_freeze(target)
    raise Fail(f"fakehost: `uv {' '.join(argv[:2])}` is not simulated", 2)


def uv_venv(args, version) -> int:
    opts, words = options(args)
    d = words[0] if words else ".venv"
    v = host_path(d)
    want = str(opts.get("--python", opts.get("-p", "3")))
    python = PYTHONS.get(want, SYSTEM_PYTHON if want.startswith("/") else None)
    if python is None:
        raise Fail(f"error: No interpreter found for Python {want} in managed installations or search path", 2)
    clear, existing = "--clear" in opts, "--allow-existing" in opts
    if (v / "pyvenv.cfg").is_file() and not (clear or existing):
        raise Fail(f"error: A virtual environment already exists at {d}; use --clear or --allow-existing", 2)
    if v.is_dir() and any(v.iterdir()) and not (v / "pyvenv.cfg").is_file() and not (clear or existing):
        raise Fail(f"error: Failed to create virtual environment\n  Caused by: The directory `{d}` exists, but it "
                   f"is not a virtual environment", 2)
    if not {"-q", "--quiet"} & set(opts):
        print(f"Using CPython {python}\nCreating virtual environment {'with seed packages ' if '--seed' in opts else ''}"
              f"at: {d}\nActivate with: source {d}/bin/activate", file=sys.stderr)
    make_venv(v, {"home": "/usr/bin", "implementation": "CPython", "uv": version, "version_info": python,
                  "include-system-site-packages": "false"}, UV_SEED if "--seed" in opts else {}, clear=clear,
              installer="uv")
    return 0


def uv_target(opts) -> Path:
    p = opts.get("--python") or opts.get("-p") or os.environ.get("VIRTUAL_ENV")
    if not p:
        raise Fail("error: No virtual environment found; run `uv venv` to create an environment, or pass "
                   "`--system` to install into a non-virtual environment", 2)
    v = host_path(p)
    v = v if (v / "pyvenv.cfg").is_file() else v.parent.parent
    if not (v / "pyvenv.cfg").is_file():
        raise Fail(f"error: Failed to inspect Python interpreter from provided path at `{p}`\n"
                   f"  Caused by: No such file or directory (os error 2)", 2)
    return v


def uv_sync(venv: Path, specs, quiet) -> int:
    """`uv pip sync`: the environment becomes exactly the listed distributions, with no dependency of its own
    resolved, and whatever is not listed is uninstalled (docs: uv pip sync)."""
    if not specs:
        raise Fail("error: Requirements file is empty; use --allow-empty-requirements to remove all packages", 2)
    fetch_or_fail(specs)
    parsed = dict(parse_spec(s) for s in specs)
    have = packages(venv)
    removed = [(n, e) for n, e in sorted(have.items()) if n not in parsed]
    added = [(n, have.get(n), e) for n, e in sorted(parsed.items()) if have.get(n) != e]
    save(venv, parsed, spellings(specs))
    for name, _ in removed:
        if name in ENTRY_POINTS.keys() and (venv / "bin" / ENTRY_POINTS[name]).exists():
            (venv / "bin" / ENTRY_POINTS[name]).unlink()
    if not quiet:
        print(f"Resolved {len(parsed)} packages in 2ms", file=sys.stderr)
        if removed or added:
            if removed:
                print(f"Uninstalled {len(removed)} packages in 12ms", file=sys.stderr)
            print(f"Prepared {len(added)} packages in 2.04s\nInstalled {len(added)} packages in 31ms", file=sys.stderr)
            for name, entry in removed:
                print(f" - {show(name, entry)}", file=sys.stderr)
            for name, old, new in added:
                print((f" - {show(name, old)}\n" if old else "") + f" + {show(name, new)}", file=sys.stderr)
        else:
            print(f"Audited {len(parsed)} packages in 3ms", file=sys.stderr)
    return 0


def fetch_or_fail(specs):
    """What fetching the distributions does here: fails as without network under `uv_fail_install`, takes the
    engine's stand-in duration for an engine."""
    if (bad := failing("uv_fail_install", [parse_spec(s)[0] for s in specs])):
        url = f"https://pypi.org/simple/{bad}/"
        raise Fail(f"error: Failed to fetch: `{url}`\n  Caused by: Request failed after 3 retries\n  Caused by: "
                   f"error sending request for url ({url})\n  Caused by: client error (Connect)\n  Caused by: dns "
                   f"error: failed to lookup address information: Temporary failure in name resolution", 2)


def uv_install(venv: Path, specs, quiet, deps=True) -> int:
    if not specs:
        raise Fail("error: the following required arguments were not provided:\n  <PACKAGE|--requirements "
                   "<REQUIREMENTS>|--editable <EDITABLE>|--group <GROUP>>", 2)
    fetch_or_fail(specs)
    changes = install(venv, specs, deps=deps)
    if not quiet:
        if not changes:
            print(f"Audited {len(specs)} package{'s' * (len(specs) != 1)} in 3ms", file=sys.stderr)
        else:
            n = len(changes)
            print(f"Resolved {len(packages(venv))} packages in 1.21s\nPrepared {n} package{'s' * (n != 1)} in 2.04s\n"
                  f"Installed {n} package{'s' * (n != 1)} in 31ms", file=sys.stderr)
            for name, old, new in sorted(changes):
                print((f" - {show(name, old)}\n" if old else "") + f" + {show(name, new)}", file=sys.stderr)
    return 0


def uv_show(venv: Path, names) -> int:
    pk = packages(venv)
    py = venv_python(venv)
    found = [norm(n) for n in names if norm(n) in pk]
    out = []
    for n in found:
        requires = sorted(ENGINE_DEPS) if n in ("sglang", "vllm") else []
        required_by = sorted(e for e in ("sglang", "vllm") if e in pk) if n in ENGINE_DEPS else []
        out.append(f"Name: {n}\nVersion: {pk[n]['version']}\nLocation: {venv}/lib/python{py}/site-packages\n"
                   f"Requires: {', '.join(requires)}\nRequired-by: {', '.join(required_by)}\n")
    sys.stdout.write("---\n".join(out))
    missing = [n for n in names if norm(n) not in pk]
    if missing:
        print(f"warning: Package(s) not found for: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


def uv_freeze(venv: Path) -> int:
    for name, e in sorted(packages(venv).items()):
        print(show(name, e))
    return 0


# ---- engines --------------------------------------------------------------------------------------------

def cmd_vllm(argv):
    if argv in (["--version"], ["-v"]):
        print(packages(here())["vllm"]["version"])
        return 0
    from .engines import serve, serving
    if argv[:1] == ["serve"] and serving():
        return serve("vllm", argv[1:])
    raise Fail("fakehost: only `vllm --version` is simulated (tests cannot keep a server running)", 2)


def cmd_torchrun(argv):
    """Records the launch in the host's var/log/fakehost/torchrun.log (tests cannot train); the argv is the record."""
    from .util import tree
    log = tree() / "var/log/fakehost/torchrun.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as handle:
        handle.write(" ".join(argv) + "\n")
    print("torchrun (fakehost): launch recorded")
    return 0


# ---- speculators ------------------------------------------------------------------------------------------

def cmd_speculators(argv):
    """`speculators convert MODEL --verifier V --algorithm A [--output-path OUT]` (speculators 0.9.0
    src/speculators/cli/convert.py convert: --verifier and --algorithm required, --output-path default
    "converted"; algorithms eagle3, mtp, dflash)."""
    if argv[:1] != ["convert"]:
        raise Fail(f"fakehost: `speculators {' '.join(argv[:1])}` is not simulated", 2)
    opts, words = {}, []
    it = iter(argv[1:])
    for a in it:
        if a in ("--verifier", "--algorithm", "--output-path", "--validate-device", "--algorithm-kwargs"):
            opts[a] = next(it, "")
        else:
            words.append(a)
    if len(words) != 1 or "--verifier" not in opts or "--algorithm" not in opts:
        raise Fail("Usage: speculators convert [OPTIONS] MODEL\nError: Missing option '--verifier' or '--algorithm'.", 2)
    if opts["--algorithm"] not in ("eagle3", "mtp", "dflash"):
        raise Fail(f"Error: Invalid value for '--algorithm': {opts['--algorithm']!r} is not one of 'eagle3', 'mtp', "
                   "'dflash'.", 2)
    return convert_model(words[0], opts["--verifier"], opts["--algorithm"], opts.get("--output-path", "converted"))


def convert_model(model: str, verifier: str, algorithm: str, output: str) -> int:
    """speculators' DFlash conversion of a local z-lab checkpoint (speculators v0.7.0
    src/speculators/convert/dflash/converter.py DFlashConverter.convert/_build_config): the config's keys other
    than architectures, auto_map, block_size, dflash_config and num_target_layers become transformer_layer_config
    (layer_types and sliding_window kept), aux_hidden_state_layer_ids = target_layer_ids + 1, mask_token_id from
    dflash_config; the weights are saved beside it (here: copied, as the stand-in has no torch)."""
    if algorithm != "dflash":
        raise Fail(f"fakehost: only dflash conversion is simulated, not {algorithm}", 2)
    source, target = host_path(model), host_path(output)
    config = json.loads((source / "config.json").read_text())
    if not (host_path(verifier) / "config.json").is_file():
        raise Fail(f"OSError: {verifier} does not appear to have a file named config.json", 1)
    dflash = config.get("dflash_config") or {}
    block_size = config.get("block_size") or dflash.get("block_size")
    if block_size is None:
        raise Fail("ValueError: Checkpoint config has no `block_size` (checked both top-level and `dflash_config`)", 1)
    ids = dflash.get("target_layer_ids")
    if ids is None:
        raise Fail("ValueError: Checkpoint config has no `dflash_config.target_layer_ids`; pass "
                   "`aux_hidden_state_layer_ids` explicitly.", 1)
    skip = {"architectures", "auto_map", "block_size", "dflash_config", "num_target_layers"}
    converted = {
        "architectures": ["DFlashDraftModel"], "speculators_model_type": "dflash", "block_size": block_size,
        "aux_hidden_state_layer_ids": [i + 1 for i in ids], "mask_token_id": dflash.get("mask_token_id"),
        "draft_vocab_size": config.get("vocab_size"),
        "transformer_layer_config": {k: v for k, v in config.items() if k not in skip},
        "speculators_config": {"algorithm": "dflash", "verifier": {"name_or_path": verifier}},
    }
    target.mkdir(parents=True, exist_ok=True)
    put(target / "config.json", json.dumps(converted, indent=2) + "\n")
    for weights in sorted(source.glob("*.safetensors")):
        put(target / weights.name, weights.read_bytes())
    print(f"Saved to: {output}")
    return 0


# speculators v0.7.0 scripts/prepare_data.py parse_args (lines 79-182): each flag with its type ("flag" for
# store_true, "append" for action="append"), whether it is required, and its default.
PREPARE_DATA_FLAGS = {
    "--model": (str, True, None), "--trust-remote-code": ("flag", False, False),
    "--data": ("append", True, None), "--seq-length": (int, False, 8192), "--max-samples": (int, False, None),
    "--token-freq-path": (str, False, None), "--assistant-pattern": (str, False, None),
    "--output": (str, False, "./output"), "--overwrite": ("flag", False, False), "--seed": (int, False, 0),
    "--num-preprocessing-workers": (int, False, 8), "--minimum-valid-tokens": (int, False, None),
    "--allow-empty-output": ("flag", False, False),
}


def prepare_data_parser():
    """The v0.7.0 parser rebuilt from PREPARE_DATA_FLAGS (tests/test_dataset_prepare_unit.py checks these facts
    against the release's own add_argument calls)."""
    parser = argparse.ArgumentParser(prog="prepare_data.py", description="Prepare data for speculator training")
    for flag, (kind, required, default) in PREPARE_DATA_FLAGS.items():
        if kind == "flag":
            parser.add_argument(flag, action="store_true")
        elif kind == "append":
            parser.add_argument(flag, type=str, action="append", required=required)
        else:
            parser.add_argument(flag, type=kind, required=required, default=default)
    return parser


def prepare_data(argv):
    """What prepare_data.py v0.7.0 main() does with its output directory (lines 185-235): skips when *.arrow is
    already there without --overwrite; otherwise makes the directory and writes what `dataset.save_to_disk` writes
    (data-00000-of-00001.arrow, dataset_info.json, state.json) and token_freq.pt. Rows are the `conversations`
    of every --data JSON-lines file; --model must be a local model directory with a tokenizer (its chat template
    formats the rows). Setting ``prepare_data_fail_once`` stops it half-way once (a partial shard left), as a
    killed run would. Each call appends its argv to var/log/fakehost/prepare_data.log."""
    log = tree() / "var/log/fakehost/prepare_data.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as handle:
        handle.write(" ".join(argv) + "\n")
    parser = prepare_data_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        raise Fail("", int(exit_.code or 0))
    model = host_path(args.model)
    if not (model / "tokenizer.json").is_file():
        raise Fail(f"OSError: Can't load tokenizer for '{args.model}'.", 1)
    output = host_path(args.output)
    if output.exists() and not args.overwrite and list(output.glob("*.arrow")):
        print("Dataset files already exists in output directory, skipping preprocessing. To existing overwrite "
              "files use --overwrite.", file=sys.stderr)
        return 0
    output.mkdir(parents=True, exist_ok=True)
    rows = []
    for data in args.data:
        for line in host_path(data).read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                if not isinstance(row.get("conversations"), list):
                    raise Fail(f"KeyError: 'conversations' (a row of {data})", 1)
                rows.append(row)
    if args.max_samples is not None:
        rows = rows[:args.max_samples]
    if not rows and not args.allow_empty_output:
        raise Fail("ValueError: preprocessing removed every sample; pass --allow-empty-output to write it anyway", 1)
    body = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
    shard = output / "data-00000-of-00001.arrow"
    if settings().get("prepare_data_fail_once"):
        write(shard, body[:len(body) // 2])
        configure(tree(), prepare_data_fail_once=None)
        raise Fail("Killed", 137)
    write(shard, body)
    fingerprint = hashlib.sha256(body + str(args.seq_length).encode()).hexdigest()[:16]
    put(output / "dataset_info.json", json.dumps({"citation": "", "description": "", "features": {
        "input_ids": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"},
        "loss_mask": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"}},
        "homepage": "", "license": ""}, indent=2) + "\n")
    put(output / "state.json", json.dumps({"_data_files": [{"filename": shard.name}], "_fingerprint": fingerprint,
                                           "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
                                           "_output_all_columns": False, "_split": None}, indent=2) + "\n")
    put(Path(args.token_freq_path and host_path(args.token_freq_path) or output / "token_freq.pt"),
        hashlib.sha256(body).digest())
    print(f"Writing dataset to {args.output}", file=sys.stderr)
    return 0
