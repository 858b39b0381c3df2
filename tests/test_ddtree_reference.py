"""The DDTree reference run's plan: the checkout unit on the simulated kpro5 (container 129), with a repository the
test serves as a local bare git repository and patches made against it; and benchmark.py's command line parsed by
the argument parser of the real benchmark.py with the project's patch applied (its `parser.add_argument` calls read
with `ast`, as tests/fixtures/ddtree/generate.py captured the upstream ones in benchmark-args.json)."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fakehost import host_env
from fakehost.tree import seed_kpro5, tree_digest, tree_listing
from gpuhosts.benchmarks import BenchmarkConfig, DDTreePatch, DDTreeReference
from gpuhosts.plans.ddtree_reference import ddtree_checkout, ddtree_job_argv, plan_ddtree_checkout
from gpuhosts.protocol import parse_facts, parse_result
from gpuhosts.services import DrafterSpec

FIXTURES = Path(__file__).parent / "fixtures" / "ddtree"
CT = "var/lib/lxc/129/rootfs"
BENCHMARK_PY = '''import argparse


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--temperature", type=float, default=0.0)
    return parser.parse_args()
'''
GIT = ["git", "-c", "user.name=gpuhosts tests", "-c", "user.email=tests@gpuhosts.invalid"]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_patch(work: Path, old: str, new: str) -> str:
    """A patch of benchmark.py made with git diff, with a header of commentary as the project's patches have."""
    path = work / "benchmark.py"
    original = path.read_text()
    path.write_text(original.replace(old, new))
    diff = git("diff", cwd=work)
    path.write_text(original)
    return f"Commentary that git apply skips.\n\n{diff}"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """A stand-in of liranringel/ddtree: one commit with a benchmark.py, served bare over file://."""
    base = tmp_path_factory.mktemp("ddtree")
    work = base / "work"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    (work / "benchmark.py").write_text(BENCHMARK_PY)
    (work / "README.md").write_text("DDTree\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "DDTree code release", cwd=work)
    bare = base / "ddtree.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=base)
    return {"work": work, "url": f"file://{bare}", "commit": git("rev-parse", "HEAD", cwd=work).strip()}


def bench_for(upstream: dict, patch_text: str, patch_file: str = "stacks/patches/ddtree-test.patch") -> BenchmarkConfig:
    reference = DDTreeReference(
        commit=upstream["commit"], drafter=DrafterSpec(repo="z-lab/Qwen3.6-27B-DFlash"), environment_of="sglang",
        patch=DDTreePatch(file=patch_file, sha256=hashlib.sha256(patch_text.encode()).hexdigest()),
        max_new_tokens=256, tree_budgets=(16, 64, 256), temperature=0.0)
    # The repository is a file:// URL, which the field's rule (https only) does not take: set past validation.
    reference = reference.model_copy(update={"repository": upstream["url"]})
    return BenchmarkConfig(name="spec", container=129, services=("sglang",)).model_copy(update={"ddtree": reference})


@pytest.fixture
def patches(upstream):
    work = upstream["work"]
    return {
        "sdpa": make_patch(work, 'default=0.0)', 'default=0.0)\n    parser.add_argument("--drafter-sdpa", action="store_true")'),
        "device-map": make_patch(work, "    return parser.parse_args()", "    # device_map=auto\n    return parser.parse_args()"),
    }


@pytest.fixture
def tree(tmp_path):
    return seed_kpro5(tmp_path / "kpro5")


def run(tree: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=host_env(tree), timeout=120)


def apply(tree: Path, script: str) -> dict:
    result = run(tree, script)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return {"changed": parse_result(result.stdout).changed, "output": result.stdout + result.stderr}


def probe(tree: Path, unit) -> dict:
    """The probe's facts; it must leave the host as it found it (running state and the stand-ins' logs aside:
    fakehost.tree.volatile)."""
    before = tree_digest(tree)
    result = run(tree, unit.probe)
    assert result.returncode == 0, result.stderr
    assert tree_digest(tree) == before, "the probe changed the host"
    return parse_facts(result.stdout)


def ct(tree: Path, path: str) -> Path:
    return tree / CT / path.lstrip("/")


def head(tree: Path, checkout: str) -> str:
    return git("rev-parse", "HEAD", cwd=ct(tree, checkout)).strip()


def test_checkout_ensures_once_then_changes_nothing(tree, upstream, patches):
    bench = bench_for(upstream, patches["sdpa"])
    unit = plan_ddtree_checkout(129, bench, patches["sdpa"], needs=())
    assert (unit.key, unit.kind, unit.container) == ("ct129-ddtree-spec", "DDTreeCheckout", 129)
    checkout = ddtree_checkout(129, bench)
    assert checkout == f"/opt/gpuhosts/ddtree/spec/{upstream['commit']}"
    assert probe(tree, unit) == {name: "missing" for name in unit.desired}
    assert "git" not in ct(tree, "/var/lib/fakehost/dpkg-installed").read_text().split()

    first = apply(tree, unit.ensure)
    assert first["changed"] and "installed git" in first["output"]
    # apt-get ran inside the container: the package is recorded in its rootfs, not on the host.
    assert "git" in ct(tree, "/var/lib/fakehost/dpkg-installed").read_text().split()
    assert "git" not in (tree / "var/lib/fakehost/dpkg-installed").read_text().split()
    assert head(tree, checkout) == upstream["commit"]
    assert "--drafter-sdpa" in ct(tree, checkout + "/benchmark.py").read_text()
    marker = ct(tree, checkout + "/.gpuhosts-checkout").read_text().strip()
    assert marker == f"{upstream['commit']} patch:{bench.ddtree.patch.sha256}"
    assert probe(tree, unit) == unit.desired

    digest = tree_digest(tree)
    second = apply(tree, unit.ensure)
    assert not second["changed"], second["output"]
    assert tree_digest(tree) == digest


def test_a_changed_patch_checks_out_again(tree, upstream, patches):
    first = plan_ddtree_checkout(129, bench_for(upstream, patches["sdpa"]), patches["sdpa"], needs=())
    apply(tree, first.ensure)
    bench = bench_for(upstream, patches["device-map"])
    unit = plan_ddtree_checkout(129, bench, patches["device-map"], needs=())
    assert probe(tree, unit) != unit.desired
    assert apply(tree, unit.ensure)["changed"]
    text = ct(tree, ddtree_checkout(129, bench) + "/benchmark.py").read_text()
    # The new patch on a clean tree: the old patch's change is gone.
    assert "device_map=auto" in text and "--drafter-sdpa" not in text
    assert probe(tree, unit) == unit.desired
    assert not apply(tree, unit.ensure)["changed"]


def test_a_checkout_edited_by_hand_is_put_back(tree, upstream, patches):
    bench = bench_for(upstream, patches["sdpa"])
    unit = plan_ddtree_checkout(129, bench, patches["sdpa"], needs=())
    apply(tree, unit.ensure)
    script = ct(tree, ddtree_checkout(129, bench) + "/benchmark.py")
    script.write_text(BENCHMARK_PY)
    assert apply(tree, unit.ensure)["changed"]
    assert "--drafter-sdpa" in script.read_text()


@pytest.mark.parametrize("case", ["against other text", "not a patch"])
def test_a_patch_that_does_not_apply_refuses(tree, upstream, case):
    text = (make_patch(upstream["work"], "default=0.0)", "default=1.0)").replace(" def main():", " def run():")
            if case == "against other text" else "no diff in here\n")
    bench = bench_for(upstream, text, "stacks/patches/stale.patch")
    unit = plan_ddtree_checkout(129, bench, text, needs=())
    result = run(tree, unit.ensure)
    assert result.returncode == 1
    refusal = [line for line in result.stderr.splitlines() if "refused:" in line]
    assert refusal and "stacks/patches/stale.patch does not apply to" in refusal[0], result.stderr
    assert ("patch failed" in refusal[0] or "No valid patches" in refusal[0]), refusal[0]
    assert not ct(tree, ddtree_checkout(129, bench) + "/.gpuhosts-checkout").exists()
    assert probe(tree, unit)[f"ddtree checkout {ddtree_checkout(129, bench)}"] == "missing"


def test_a_declared_digest_that_differs_is_refused_at_plan_time(upstream, patches):
    bench = bench_for(upstream, patches["sdpa"])
    with pytest.raises(ValueError, match="not the declared"):
        plan_ddtree_checkout(129, bench, patches["device-map"], needs=())


def test_teardown_leaves_nothing_of_ours_and_nothing_else_touched(tree, upstream, patches):
    # git stays installed after teardown (other checkouts use it), so it is there from the start here.
    with ct(tree, "/var/lib/fakehost/dpkg-installed").open("a") as installed:
        installed.write("git\n")
    other = ct(tree, "/opt/gpuhosts/ddtree/notes/mine.txt")
    other.parent.mkdir(parents=True)
    other.write_text("a user's file\n")
    start = tree_listing(tree)
    bench = bench_for(upstream, patches["sdpa"])
    unit = plan_ddtree_checkout(129, bench, patches["sdpa"], needs=())
    apply(tree, unit.ensure)
    assert apply(tree, unit.teardown)["changed"]
    after = tree_listing(tree)
    assert {k: (start.get(k), after.get(k)) for k in set(start) | set(after) if start.get(k) != after.get(k)} == {}
    assert not apply(tree, unit.teardown)["changed"]
    other.unlink()
    other.parent.rmdir()
    apply(tree, unit.ensure)
    apply(tree, unit.teardown)
    assert not ct(tree, "/opt/gpuhosts/ddtree").exists()


def test_a_directory_gpuhosts_did_not_make_is_left_alone(tree, upstream, patches):
    bench = bench_for(upstream, patches["sdpa"])
    unit = plan_ddtree_checkout(129, bench, patches["sdpa"], needs=())
    foreign = ct(tree, ddtree_checkout(129, bench))
    foreign.mkdir(parents=True)
    (foreign / "benchmark.py").write_text("# someone's own copy\n")
    result = run(tree, unit.ensure)
    assert result.returncode == 1 and "was not made by gpuhosts" in result.stderr
    apply(tree, unit.teardown)
    assert (foreign / "benchmark.py").read_text() == "# someone's own copy\n"


def test_the_checkout_needs_a_reference():
    with pytest.raises(ValueError, match="declares no ddtree"):
        ddtree_checkout(129, BenchmarkConfig(name="spec", container=129, services=("sglang",)))


def _generator():
    spec = importlib.util.spec_from_file_location("ddtree_fixture_generate", FIXTURES / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def patched_benchmark_py(tmp_path: Path) -> str:
    """benchmark.py at the pinned commit with stacks/patches/ddtree-gdn-hybrid.patch applied, as the checkout
    unit applies it."""
    tree = tmp_path / "patched"
    shutil.copytree(FIXTURES / "upstream-c96427a", tree)
    subprocess.run(["git", "init", "--quiet"], cwd=tree, check=True)
    subprocess.run(["git", "apply", str(Path(__file__).resolve().parents[1] / "stacks/patches/ddtree-gdn-hybrid.patch")],
                   cwd=tree, check=True)
    return (tree / "benchmark.py").read_text()


def benchmark_parser(arguments: list[dict]) -> argparse.ArgumentParser:
    """benchmark.py's parser rebuilt from its `parser.add_argument` calls."""
    types = {"str": str, "int": int, "float": float}
    parser = argparse.ArgumentParser(exit_on_error=False, add_help=False)
    for argument in arguments:
        options = {k: v for k, v in argument.items() if k != "flags"}
        if "type" in options:
            options["type"] = types[options["type"]]
        parser.add_argument(*argument["flags"], **options)
    return parser


class ParserError(Exception):
    pass


@pytest.fixture(scope="module")
def patched_arguments(tmp_path_factory) -> list[dict]:
    return _generator().benchmark_args(patched_benchmark_py(tmp_path_factory.mktemp("ddtree-patched")))


def parse(words: list[str], arguments: list[dict] | None = None) -> argparse.Namespace:
    parser = benchmark_parser(arguments or json.loads((FIXTURES / "benchmark-args.json").read_text())["arguments"])

    def error(message):
        raise ParserError(message)

    parser.error = error
    return parser.parse_args(words)


def test_the_captured_upstream_flags_are_what_the_generator_reads_from_the_fixture_file():
    captured = json.loads((FIXTURES / "benchmark-args.json").read_text())["arguments"]
    assert _generator().benchmark_args((FIXTURES / "upstream-c96427a/benchmark.py").read_text()) == captured


@pytest.mark.parametrize("reference, thinking, answers", [
    ({}, True, ["--prompts", "/usr/local/lib/gpuhosts/benchmarks/spec/prompts.json"]),
    ({}, False, ["--prompts", "/usr/local/lib/gpuhosts/benchmarks/spec/prompts.json"]),
    ({"dataset": "mt-bench", "max_samples": 8}, True, ["--dataset", "mt-bench", "--max-samples", "8"]),
], ids=["the benchmark's prompts, thinking on", "thinking off", "a data set"])
def test_job_argv_is_what_the_patched_benchmark_py_parses(upstream, patches, patched_arguments, reference, thinking,
                                                          answers):
    bench = bench_for(upstream, patches["sdpa"])
    bench = bench.model_copy(update={"thinking": thinking, "ddtree": bench.ddtree.model_copy(update=reference)})
    prompts = "/usr/local/lib/gpuhosts/benchmarks/spec/prompts.json"
    argv = ddtree_job_argv(bench, "/opt/gpuhosts/sglang/venv/bin/python", "/srv/models/Qwen/Qwen3.6-27B",
                           "/var/lib/gpuhosts/ddtree/spec/run.pt", prompts)
    assert argv[:2] == ["/opt/gpuhosts/sglang/venv/bin/python", "benchmark.py"]
    assert [w for w in answers if w in argv] == answers
    args = parse(argv[2:], patched_arguments)
    assert vars(args) == {
        "model_name_or_path": "/srv/models/Qwen/Qwen3.6-27B",
        "draft_name_or_path": "/srv/models/z-lab/Qwen3.6-27B-DFlash",
        "block_size": None, "tree_budget": "16,64,256",
        "dataset": reference.get("dataset"), "prompts": None if reference else prompts,
        "thinking": "on" if thinking else "off", "max_samples": reference.get("max_samples"),
        "max_new_tokens": 256, "temperature": 0.0, "flash_attn": False, "disable_cpp_compact_cache": False,
        "save_path": "/var/lib/gpuhosts/ddtree/spec/run.pt"}


def test_without_max_new_tokens_the_reference_generates_the_prompts_max_tokens(upstream, patches):
    bench = bench_for(upstream, patches["sdpa"])
    bench = bench.model_copy(update={"ddtree": bench.ddtree.model_copy(update={"max_new_tokens": None})})
    argv = ddtree_job_argv(bench, "python", "/m", "/r.pt", "/p.json")
    assert argv[argv.index("--max-new-tokens") + 1] == str(bench.prompts.max_tokens)


@pytest.mark.parametrize("words,message", [
    (["--draft-name-or-path", "d", "--dataset", "gsm8k"], "required"),
    (["--model-name-or-path", "m", "--draft-name-or-path", "d", "--dataset", "gsm8k", "--tree-budgets", "16"],
     "unrecognized"),
])
def test_the_captured_parser_refuses_what_benchmark_py_refuses(words, message):
    with pytest.raises((ParserError, argparse.ArgumentError), match=message):
        parse(words)


def test_the_patched_parser_refuses_a_thinking_mode_it_does_not_know(patched_arguments):
    with pytest.raises((ParserError, argparse.ArgumentError), match="invalid choice"):
        parse(["--model-name-or-path", "m", "--draft-name-or-path", "d", "--prompts", "p", "--thinking", "yes"],
              patched_arguments)


def rendered_scripts(upstream: dict, patch_text: str) -> list[tuple[str, str]]:
    """The unit's scripts and the parts they run inside the container (shellcheck does not read into a quoted
    here-document; tests/test_shellcheck.py reaches only the units of the stacks' plans)."""
    unit = plan_ddtree_checkout(129, bench_for(upstream, patch_text), patch_text, needs=())
    found = []
    for operation in ("ensure", "teardown", "probe"):
        text = getattr(unit, operation)
        found.append((operation, text))
        for inner in [p.split("\nGPUHOSTS_INNER\n", 1)[0] for p in text.split("<<'GPUHOSTS_INNER'\n")[1:]]:
            found.append((f"{operation}-in-container", inner))
    return found


def test_scripts_are_shellcheck_clean(upstream, patches, tmp_path):
    assert shutil.which("shellcheck"), "shellcheck is missing: `make system-deps` installs it"
    for name, text in rendered_scripts(upstream, patches["sdpa"]):
        script = tmp_path / f"{name}.sh"
        script.write_text(text)
        syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert syntax.returncode == 0, f"{name}: {syntax.stderr}"
        lint = subprocess.run(["shellcheck", "--shell", "bash", "--severity", "style", str(script)],
                              capture_output=True, text=True)
        assert lint.returncode == 0, f"{name}:\n{lint.stdout}"
