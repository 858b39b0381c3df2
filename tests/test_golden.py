"""What the kpro5 and trainer stacks install and run, against reviewed golden copies (tests/golden/STACK).

The golden copy is the plan's host folder as a reviewer reads it: installed units and config files, each unit's
scripts, `unit.json` (needs, desired facts) and `graph.json`, in full. Left out, each for a one-line marker with its
digest, is only what is read or tested elsewhere:

* the shared script library and the helper includes every script of a kind inlines (`SHARED`): a marker names the
  template, its digest and the values it was rendered with; the template is reviewed as itself;
* the content of a file a script installs: it is in the golden copy in full, at its installed path;
* files that are copies of modules tested on their own (`ELSEWHERE`): a `<path>.sha256` marker file.

After an intended change: `make golden`, then review the diff of tests/golden like any other code.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import jinja2
import pytest

from conftest import PROJECT
from gpuhosts.plan import write_plan
from gpuhosts.render import HEREDOC_END, TEMPLATES, _ENV

GOLDEN_ROOT = Path(__file__).resolve().parent / "golden"
STACKS = {"kpro5": "kpro5", "trainer": "trainer"}  # stack: host folder
# The vfio binding's gathering first: it holds the VM table and the decisions' plumbing, which other units include
# on their own.
SHARED = ("common/lib.sh.j2", "vfio_binding/decide.sh.j2", "common/vms.sh.j2", "common/decisions.sh.j2",
          "vfio_binding/pci.sh.j2", "common/container.sh.j2",
          "common/systemd-show.sh.j2", "common/systemd-repair.sh.j2", "common/systemd.sh.j2")
# Every environment's and every download's probe and ensure read what is there with the same functions.
SHARED += ("python_env/distributions.sh.j2", "model_download/model-files.sh.j2")
# Installed path (inside its container for containers/<vmid>/…) → what the file is and where it is tested.
ELSEWHERE = {
    "opt/gpuhosts/monitor/app/gpuhosts_monitor/": "a file of gpuhosts_monitor/ under a managed-by header; "
                                                  "tests/test_monitor_deploy.py, tests/test_monitor.py",
    "usr/local/lib/gpuhosts/deploy-gate.py": "gpuhosts/hostside/gate_probe.py verbatim; tests/test_deploy_gate.py",
    "usr/local/lib/gpuhosts/check-hidden-states.py": "gpuhosts/hostside/hidden_state_check.py; "
                                                     "tests/test_hidden_state_check.py",
    "usr/local/lib/gpuhosts/check-drafter-config.py": "gpuhosts/hostside/drafter_config.py verbatim; "
                                                      "tests/test_drafter_config.py",
    "usr/local/lib/gpuhosts/dataset-prepare.py": "gpuhosts/hostside/dataset_prepare.py verbatim; tests/test_dataset_mix.py",
    "usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py": "gpuhosts/hostside/bench_probe.py verbatim; "
                                                               "tests/test_bench_table.py, tests/test_benchmark_unit.py",
    "usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/ddtree-result.py": "gpuhosts/hostside/ddtree_result.py verbatim; "
                                                                       "tests/test_ddtree_result.py",
    "opt/gpuhosts/ddtree/": "stacks/patches/ddtree-gdn-hybrid.patch, its sha256 pinned by the stack; "
                            "tests/test_ddtree_reference.py",
    "usr/local/lib/gpuhosts/sglang-serve.py": "in full in tests/golden/services/qwen-sglang; "
                                              "tests/test_inference_units.py",
}


def sha16(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# A unit's decisions embedded in its scripts (the here-document GPUHOSTS_DECIDER): the hostside module they are,
# verbatim, and where they are tested.
DECIDERS = {"gpuhosts/hostside/vfio_binding.py": "tests/test_vfio_binding_cases.py",
            "gpuhosts/hostside/lxc_gpu_passthrough.py": "tests/test_lxc_gpu_passthrough_cases.py",
            "gpuhosts/hostside/nvidia_driver.py": "tests/test_nvidia_driver_cases.py",
            "gpuhosts/hostside/guest_table.py": "tests/test_guest_table_cases.py"}
# The here-documents that carry a decision module: the unit's own, and the guest tables of templates/common/vms.sh.j2.
DECIDER_ENDS = ("GPUHOSTS_DECIDER", "GPUHOSTS_GUEST_TABLE")


def decider_pointer(body: str) -> str | None:
    """The line that stands for an embedded decision module's text, when `body` is one verbatim."""
    for module, tested in DECIDERS.items():
        if (PROJECT / module).read_text() == body:
            return f"# [{module} sha256:{sha16(body)} verbatim; {tested}]"
    return None


def inlined(template: str) -> str:
    """The template's source with its `{% include %}`s replaced by theirs, as rendering inlines them."""
    return re.sub(r'{% include "([^"]+)" %}', lambda m: inlined(m[1]).removesuffix("\n"),
                  (TEMPLATES / template).read_text())


def shared_pattern(template: str) -> tuple[re.Pattern, list[str | None]]:
    """A pattern matching `template` as a script inlines it, and per group the variable it stands for.
    Expressions of the environment's globals are rendered exactly; the others match one line's worth."""
    source = inlined(template)
    assert "{%" not in source and "{{#" not in source, f"{template}: a block tag or comment needs a better matcher"
    parts, names = [], []
    for index, piece in enumerate(re.split(r"({{.*?}})", source)):
        if index % 2 == 0:
            parts.append(re.escape(piece))
            continue
        try:
            rendered = _ENV.from_string(piece).render()
            # A decision module a shared template embeds itself is folded first (fold_deciders).
            parts.append(re.escape(decider_pointer(rendered + "\n") or rendered))
        except jinja2.UndefinedError:
            parts.append(r"([^\n]*?)")
            names.append(re.match(r"{{\s*(\w+)", piece)[1])
    return re.compile("".join(parts)), names


PATTERNS = {template: shared_pattern(template) for template in SHARED}


def fold_shared(script: str) -> str:
    for template, (pattern, names) in PATTERNS.items():
        digest = sha16(inlined(template))

        def marker(match: re.Match) -> str:
            values = dict(zip(names, match.groups()))
            shown = "".join(f" {name}={value}" for name, value in values.items())
            return f"# [templates/{template} sha256:{digest}{shown}]\n"

        script = pattern.sub(marker, script)
    return script


# An environment's lock (beside its venv) is a copy of a committed file of locks/, tested there.
LOCK = "a copy of a committed lock of locks/ (header: requirement, python, constraints); tests/test_python_env_locks.py"


def elsewhere(name: str) -> str | None:
    inside = re.sub(r"^containers/\d+/", "", name)
    if inside.startswith("opt/gpuhosts/") and inside.endswith("/requirements.lock"):
        return LOCK
    return next((why for path, why in ELSEWHERE.items() if inside == path or inside.startswith(path)), None)


def fold_deciders(script: str) -> str:
    """The body of each embedded decision module, when it is that module verbatim, by a pointer to it."""
    def pointer(match: re.Match) -> str:
        line = decider_pointer(match["body"])
        return match[0] if line is None else f"{match['head']}{line}\n{match['end']}"

    ends = "|".join(DECIDER_ENDS)
    return re.sub(rf"(?P<head><<'(?P<end>{ends})'\n)(?P<body>.*?\n)(?P=end)$", pointer, script, flags=re.S | re.M)


def fold_installs(script: str, installed: dict[str, str]) -> str:
    """The body of each `install_file` here-document, when it is a file of the golden copy, by a pointer to it."""
    def pointer(match: re.Match) -> str:
        path, body = match["path"].strip("'"), match["body"]
        found = [name for name in (path.lstrip("/"), *(n for n in installed if n.endswith(path) and
                                                       n.startswith("containers/"))) if installed.get(name) == body]
        if not found:
            return match[0]
        target = found[0] + (".sha256" if elsewhere(found[0]) else "")
        return f"{match['head']}# [content: {target} sha256:{sha16(body)}]\n{HEREDOC_END}"

    return re.sub(rf"(?P<head>install_file (?P<path>\S+) \d+ <<'{HEREDOC_END}'\n)(?P<body>.*?\n){HEREDOC_END}$",
                  pointer, script, flags=re.S | re.M)


def reviewed(host_dir: Path) -> dict[str, str]:
    """The plan's host folder as the golden copy holds it: relative path → content (a file kept in full keeps its
    mode, see `mode_of`)."""
    files = {str(p.relative_to(host_dir)): p.read_text() for p in sorted(host_dir.rglob("*")) if p.is_file()}
    installed = {name: text for name, text in files.items() if not name.startswith("commands/") and name != "graph.json"}
    view = {}
    for name, text in files.items():
        if name in installed and elsewhere(name):
            view[name + ".sha256"] = f"sha256:{sha16(text)}  {elsewhere(name)}\n"
        elif name.startswith("commands/") and name.endswith(".sh"):
            view[name] = fold_installs(fold_shared(fold_deciders(text)), installed)
        else:
            view[name] = text
    return view


def mode_of(root: Path, name: str) -> int:
    """The mode a golden file has: the rendered file's for one kept in full (an installed script stays executable)."""
    source = root / name
    return (source.stat().st_mode & 0o777) if source.is_file() else 0o644


def render_stack(tmp_path_factory, stack: str) -> Path:
    out = tmp_path_factory.mktemp("plan") / stack
    write_plan(PROJECT, stack, PROJECT / "stacks" / f"Pulumi.{stack}.yaml", out)
    return out / "hosts" / STACKS[stack]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render_stack(tmp_path_factory, "kpro5")


@pytest.fixture(scope="module", params=sorted(STACKS))
def each_stack(request, tmp_path_factory) -> tuple[Path, Path]:
    return render_stack(tmp_path_factory, request.param), GOLDEN_ROOT / request.param


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_golden_files(each_stack):
    rendered, golden = each_stack
    view = reviewed(rendered)
    if os.environ.get("GPUHOSTS_UPDATE_GOLDEN"):
        shutil.rmtree(golden, ignore_errors=True)
        for name, text in view.items():
            (golden / name).parent.mkdir(parents=True, exist_ok=True)
            (golden / name).write_text(text)
            (golden / name).chmod(mode_of(rendered, name))
    assert sorted(view) == files_under(golden), "files added or removed: run `make golden` and review"
    for name in files_under(golden):
        assert view[name] == (golden / name).read_text(), f"{name} differs: `make golden`, review"
        assert (golden / name).stat().st_mode & 0o777 == mode_of(rendered, name), f"{name}: mode differs"


def test_every_inlined_library_and_installed_file_is_folded(each_stack):
    """A script that inlines the library or installs a file the golden copy holds shows a marker instead; a
    marker names what the plan really contains."""
    rendered, _golden = each_stack
    view = reviewed(rendered)
    for name, text in view.items():
        if not name.endswith(".sh") or not name.startswith("commands/"):
            continue
        original = (rendered / name).read_text()
        assert "install_file() {" not in text and "# --- container helpers" not in text, name
        assert "# --- PCI binding helpers" not in text, name
        assert text.count("# [templates/common/lib.sh.j2 sha256:") == original.count("\ninstall_file() {\n"), name
        for path, digest in re.findall(r"# \[content: (\S+) sha256:(\w+)\]", text):
            assert sha16((rendered / path.removesuffix(".sha256")).read_text()) == digest, (name, path)


def test_the_markers_hold_the_values_the_library_was_rendered_with(rendered):
    devices = reviewed(rendered)["commands/ct129-gpu-devices/ensure.sh"]
    assert devices.startswith("# [templates/common/lib.sh.j2 sha256:")
    assert "unit=ct129-gpu-devices]\n" in devices.splitlines(True)[0]
    assert re.search(r"# \[templates/common/container\.sh\.j2 sha256:\w{16} vmid=129 "
                     r"allow_restart=(true|false)\]", devices)
    vfio = reviewed(rendered)["commands/vfio-binding/ensure.sh"]
    assert re.search(r"# \[templates/vfio_binding/pci\.sh\.j2 sha256:\w{16}\]", vfio)
    assert re.search(r"# \[gpuhosts/hostside/vfio_binding\.py sha256:\w{16} verbatim; ", vfio)


def test_files_tested_elsewhere_are_a_digest_of_what_the_host_receives(each_stack):
    rendered, _golden = each_stack
    view = reviewed(rendered)
    markers = [name for name in view if name.endswith(".sha256")]
    assert markers, "no file is tested elsewhere?"
    for name in markers:
        assert view[name].split()[0] == "sha256:" + sha16((rendered / name.removesuffix(".sha256")).read_text())


def test_installed_files_carry_the_managed_header(each_stack):
    rendered, golden = each_stack
    installed = [n for n in files_under(rendered) if not n.startswith("commands/") and n != "graph.json"]
    if golden.name == "kpro5":
        # 7 on the host (the initramfs hook among them), 12 in container 129 (4 of them environments' locks, DDTree's
        # own among them, 4 the benchmark's client, its prompts file, the DDTree reader and patch), 11 of
        # gpuhosts:monitoring on the host (2 exporter units, the DCGM counters, the rule file, 3 file_sd files, 2 scrape
        # fragments, a dashboard and its provisioning)
        assert len(installed) == 30
    for name in installed:
        if name.endswith(".patch"):
            continue  # a declared patch is installed byte for byte, as its pinned sha256 says: no header of ours
        if name.endswith(".json") and "/gpuhosts/monitoring/" in f"/{name}":
            # JSON has no comments: file_sd targets (a list) and Grafana dashboards say nothing of who wrote them;
            # the scrape fragment and the provisioning file that name them carry the header
            continue
        assert "managed by gpuhosts" in "".join((rendered / name).read_text().splitlines(True)[:2]), name


def test_vfio_files_bind_exactly_the_two_3090_slots(rendered):
    override = (rendered / "usr/local/lib/gpuhosts/vfio-override.sh").read_text()
    assert '"$root"/sys/bus/pci/devices/0000:01:00.* "$root"/sys/bus/pci/devices/0000:21:00.*' in override
    assert "0000:41" not in override and "0000:61" not in override
    modprobe = (rendered / "etc/modprobe.d/gpuhosts-vfio.conf").read_text()
    assert "ids=" not in modprobe.replace("by device id", ""), "binding must be by address, never by device id"
    assert "softdep nvidia pre: vfio-pci" in modprobe
