"""`gpuhosts plan`: what it writes, that it writes it identically twice, and that bad input writes nothing."""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhosts import cli, metrics, observability
import yaml

from gpuhosts.plan import SECRET_PLACEHOLDER, is_host_unit
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.stacks import validate_stack

from conftest import KPRO5_SECRETS, PROJECT, kpro5_values

GPUHOSTS = [sys.executable, "-m", "gpuhosts.cli"]


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUHOSTS, "plan", *args], capture_output=True, text=True, cwd=PROJECT)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def kpro5_graph():
    """The committed kpro5 stack's units, as the plan derives them."""
    return plan_host(validate_stack(kpro5_values(benchmarks=True), KPRO5_SECRETS))


def test_kpro5_summary_binds_exactly_the_3090s_and_gives_ct129_the_a6000s(tmp_path):
    result = plan("kpro5", "--out", str(tmp_path / "kpro5"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "kpro5" / "summary.json").read_text())
    host = summary["hosts"]["kpro5"]
    assert host["driver"] == {
        "version": "580.126.09", "kernelModuleType": "open", "sha256": host["driver"]["sha256"],
        "url": "https://download.nvidia.com/XFree86/Linux-x86_64/580.126.09/NVIDIA-Linux-x86_64-580.126.09.run",
    }
    assert host["vfio"] == ["0000:01:00.0", "0000:21:00.0"]
    assert host["nvidia"] == ["0000:41:00.0", "0000:61:00.0"]
    assert {k: v["model"] for k, v in host["gpus"].items() if v["use"] == "vfio"} == {
        "0000:01:00.0": "RTX 3090", "0000:21:00.0": "RTX 3090"}
    assert host["containers"] == {"129": {**host["containers"]["129"], "gpus": ["0000:41:00.0", "0000:61:00.0"],
                                          "userspace": "580.126.09"}}

    resources = json.loads((tmp_path / "kpro5" / "resources.json").read_text())
    graph = kpro5_graph()
    assert {r["type"] for r in resources} == {"gpuhosts:host:ProxmoxHost", "gpuhosts:host:Gpu"} | {
        f"gpuhosts:host:{path[-1][0]}" for path in graph.components()} | {
        f"pulumi-python:dynamic/gpuhosts:{unit.kind}" for unit in graph}
    assert all({"type", "name", "parent", "dependencies", "inputs", "aliases"} <= set(r) for r in resources)
    commands = tmp_path / "kpro5" / "hosts" / "kpro5" / "commands"
    order = {p.name: json.loads((p / "unit.json").read_text())["applyOrder"] for p in commands.iterdir()}
    assert sorted(order, key=order.get) == [unit.key for unit in graph.apply_order]
    assert sorted(order.values()) == list(range(1, len(graph) + 1))


def test_the_plan_prints_and_writes_the_resource_tree_as_a_preview_shows_it(tmp_path):
    result = plan("kpro5", "--out", str(tmp_path / "kpro5"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "kpro5" / "tree.txt").read_text()
    assert result.stdout.endswith("\n\n" + text)
    lines = text.splitlines()
    assert lines[0].split() == ["pulumi:pulumi:Stack", "gpuhosts-kpro5"]
    assert lines[1].split() == ["└─", "gpuhosts:host:ProxmoxHost", "kpro5"]
    # Every resource once, with its type, indented one step below its parent.
    resources = {r["urn"]: r for r in json.loads((tmp_path / "kpro5" / "resources.json").read_text())}
    depth = {}
    for line in lines[1:]:
        *_, type_, name = line.split()
        indent = (len(line) - len(line.lstrip(" │├└─"))) // 3
        (urn,) = [u for u, r in resources.items() if (r["type"], r["name"]) == (type_, name)]
        depth[urn] = indent
    assert sorted(depth) == sorted(resources)
    for urn, r in resources.items():
        assert depth[urn] == depth.get(r["parent"], 0) + 1, urn  # the stack's line is depth 0


def test_two_runs_are_byte_identical(tmp_path):
    assert plan("kpro5", "--out", str(tmp_path / "a")).returncode == 0
    assert plan("kpro5", "--out", str(tmp_path / "b")).returncode == 0
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert not filecmp.dircmp(tmp_path / "a", tmp_path / "b").diff_files


def test_kpro5_summary_shows_both_services_with_derived_flags(tmp_path):
    result = plan("kpro5", "--out", str(tmp_path / "kpro5"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "kpro5" / "summary.json").read_text())
    services = summary["hosts"]["kpro5"]["containers"]["129"]["services"]
    assert sorted(services) == ["qwen-sglang", "qwen-vllm-dflash"]
    sglang, vllm = services["qwen-sglang"], services["qwen-vllm-dflash"]
    assert (sglang["enabled"], sglang["engine"], sglang["listen"]) == (True, "sglang[all]==0.5.11", "0.0.0.0:30000")
    flags = " ".join(sglang["argv"])
    assert ("--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4 --mamba-scheduler-strategy extra_buffer") in flags
    # 0.5.11 defaults to the v2 speculative path; its variable is left out (compat-rules.yaml, engines rows).
    assert "SGLANG_ENABLE_SPEC_V2" not in sglang["environment"]
    assert sglang["gate"]["reasoning_field"] == "reasoning_content"
    assert sglang["gate"]["min_acceptance_length"] == 2.0 and sglang["gate"]["min_decode_tokens_per_s"] == 20
    assert (vllm["enabled"], vllm["listen"], vllm["gate"]) == (False, "0.0.0.0:8000", None)
    assert vllm["drafterTargetLayerIds"] == [1, 16, 31, 46, 61]
    assert "VLLM_USE_V2_MODEL_RUNNER" not in vllm["environment"]
    assert "--enable-auto-tool-choice --tool-call-parser qwen3_coder" in " ".join(vllm["argv"])
    assert '"method":"dflash"' in " ".join(vllm["argv"])
    assert "gated: gpuhosts:hfToken" in vllm["weights"]["/srv/models/Qwen3.6-27B-DFlash"]
    # Secrets set only with the CLI are named, stood in for, and announced.
    for name in ("hfToken", "llmApiKey", "sshPrivateKey"):
        assert any(f"gpuhosts:{name}" in w and "not set in the stack file" in w for w in summary["warnings"]), name
        assert f"gpuhosts:{name}" in result.stderr
    stdin = {p.parent.name: json.loads(p.read_text())["stdin"]
             for p in (tmp_path / "kpro5" / "hosts" / "kpro5" / "commands").glob("*/unit.json")}
    assert len(stdin) == len(kpro5_graph()) and {k: v for k, v in stdin.items() if v} == {
        "ct129-model-qwen3-6-27b-dflash": "[secret gpuhosts:hfToken]",
        "ct129-service-qwen-vllm-dflash": "[secret gpuhosts:llmApiKey]",
        "ct129-service-qwen-sglang": "[secret gpuhosts:llmApiKey]"}


def test_secrets_from_the_stack_file_never_reach_the_plan(tmp_path):
    document = yaml.safe_load((PROJECT / "stacks" / "Pulumi.kpro5.yaml").read_text())
    for name in ("sshPrivateKey", "hfToken", "llmApiKey"):
        document["config"][f"gpuhosts:{name}"] = {"secure": f"v1:ZmFrZS1jaXBoZXJ0ZXh0LW9m{name}"}
    stack_file = tmp_path / "Pulumi.kpro5.yaml"
    stack_file.write_text(yaml.safe_dump(document))
    result = plan("kpro5", "--stack-file", str(stack_file), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "is not set in the stack file" not in result.stderr
    text = "".join(p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert "ZmFrZS1jaXBoZXJ0ZXh0" not in text and SECRET_PLACEHOLDER not in text
    # A unit that receives a secret shows only that it does; the SSH key is in no input at all.
    resources = json.loads((tmp_path / "out" / "resources.json").read_text())
    assert {r["name"] for r in resources if r["inputs"].get("secret") == "[secret]"} == {
        "ct129-model-qwen3-6-27b-dflash", "ct129-service-qwen-vllm-dflash", "ct129-service-qwen-sglang"}
    assert "sshPrivateKey" not in json.dumps(resources)


def test_a_secret_in_plain_text_is_refused_without_echoing_it(tmp_path):
    document = yaml.safe_load((PROJECT / "stacks" / "Pulumi.kpro5.yaml").read_text())
    document["config"]["gpuhosts:hfToken"] = "hf_plainTextTokenValue"
    stack_file = tmp_path / "Pulumi.kpro5.yaml"
    stack_file.write_text(yaml.safe_dump(document))
    result = plan("kpro5", "--stack-file", str(stack_file), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "gpuhosts:hfToken: holds a secret as plain text" in result.stderr
    assert "hf_plainTextTokenValue" not in result.stderr + result.stdout and not (tmp_path / "out").exists()


def test_invalid_stack_fails_with_the_field_and_writes_nothing(tmp_path):
    document = yaml.safe_load((PROJECT / "stacks" / "Pulumi.kpro5.yaml").read_text())
    document["config"]["gpuhosts:nvidia"]["version"] = "580"
    document["config"]["gpuhosts:gpus"][3]["container"] = 130
    stack_file = tmp_path / "Pulumi.bad.yaml"
    stack_file.write_text(yaml.safe_dump(document))
    out = tmp_path / "out"
    result = plan("bad", "--stack-file", str(stack_file), "--out", str(out))
    assert result.returncode == 2
    assert "gpuhosts:nvidia.version" in result.stderr and "gpuhosts:gpus[3].container" in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [stack_file]


def test_invalid_stack_leaves_an_earlier_plan_untouched(tmp_path):
    out = tmp_path / "out"
    assert plan("kpro5", "--out", str(out)).returncode == 0
    before = tree(out)
    result = plan("missing", "--stack-file", str(tmp_path / "nope.yaml"), "--out", str(out))
    assert result.returncode == 1 and "does not exist" in result.stderr
    assert tree(out) == before


def test_trainer_plan_shows_the_gpu_split_and_the_three_layer_id_lists(tmp_path):
    result = plan("trainer", "--out", str(tmp_path / "trainer"))
    assert result.returncode == 0, result.stderr
    training = json.loads((tmp_path / "trainer" / "summary.json").read_text())["hosts"]["trainer"]["training"]
    assert training["gpus"] == {"count": 8, "model": "RTX PRO 6000", "server": [0, 1, 2, 3], "training": [4, 5, 6, 7]}
    assert training["layerIds"] == {"drafterConfig": [1, 16, 31, 46, 61], "trainer": [2, 17, 32, 47, 62],
                                    "serverExtracts": [2, 17, 32, 47, 62, 64]}
    assert training["keptOnDestroy"] == ["/data/models/Qwen/Qwen3.6-27B", "/data/models/z-lab/Qwen3.6-27B-DFlash",
                                         "/data/models/z-lab/Qwen3.6-27B-DFlash.speculators",
                                         "/data/data/qwen36-mix-913k", "/data/checkpoints/Qwen3.6-27B-DFlash",
                                         "/data/checkpoints/Qwen3.6-27B-DFlash-smoke"]
    assert "layer ids: drafter config [1, 16, 31, 46, 61], trainer [2, 17, 32, 47, 62], server extracts" in result.stdout
    script = (tmp_path / "trainer" / "hosts" / "trainer" / "opt/gpuhosts/training/train_dflash_qwen36.sh").read_text()
    assert "--nproc_per_node 4" in script and "export CUDA_VISIBLE_DEVICES=4,5,6,7" in script


def test_each_unit_folder_holds_its_scripts_the_resources_name_by_digest(tmp_path):
    assert plan("kpro5", "--out", str(tmp_path / "kpro5")).returncode == 0
    host = tmp_path / "kpro5" / "hosts" / "kpro5"
    resources = {r["name"]: r for r in json.loads((tmp_path / "kpro5" / "resources.json").read_text())
                 if is_host_unit(r["type"])}
    assert sorted(resources) == sorted(p.name for p in (host / "commands").iterdir())
    for name, resource in resources.items():
        folder = host / "commands" / name
        assert sorted(p.name for p in folder.iterdir()) == ["ensure.sh", "probe.sh", "teardown.sh", "unit.json"]
        for script in ("ensure", "teardown", "probe"):
            digest = hashlib.sha256((folder / f"{script}.sh").read_text().rstrip("\n").encode()).hexdigest()[:16]
            digest_nl = hashlib.sha256((folder / f"{script}.sh").read_text().encode()).hexdigest()[:16]
            assert resource["inputs"][script] in (f"[commands/{name}/{script}.sh sha256:{digest}]",
                                                  f"[commands/{name}/{script}.sh sha256:{digest_nl}]"), name
        unit = json.loads((folder / "unit.json").read_text())
        assert unit["desired"] == resource["inputs"]["facts"], name
        assert sorted(unit["needs"]) == sorted(d.rsplit("::", 1)[1] for d in resource["dependencies"]), name
        for need in unit["needs"]:
            assert name in json.loads((host / "commands" / need / "unit.json").read_text())["neededBy"], name
    graph = json.loads((host / "graph.json").read_text())
    assert graph["teardownOrder"] == sorted(resources, key=lambda n: -json.loads(
        (host / "commands" / n / "unit.json").read_text())["applyOrder"])
    assert [key for wave in graph["waves"] for key in wave] == list(reversed(graph["teardownOrder"]))


@pytest.mark.parametrize("stack", sorted(p.name.split(".")[1] for p in (PROJECT / "stacks").glob("Pulumi.*.yaml")))
def test_every_committed_stack_plans_offline_and_names_its_unset_secrets(stack, tmp_path):
    result = plan(stack, "--out", str(tmp_path / stack))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / stack / "summary.json").read_text())
    assert any("gpuhosts:sshPrivateKey" in w and "not set in the stack file" in w for w in summary["warnings"])
    graph = json.loads(next((tmp_path / stack / "hosts").glob("*/graph.json")).read_text())
    assert sorted(graph["teardownOrder"]) == sorted(unit for wave in graph["waves"] for unit in wave)


def test_a_service_whose_release_the_metric_catalog_lacks_is_refused_with_exit_2(tmp_path, monkeypatch, capsys):
    """Alert rules on names nobody read from that release would never fire: the plan refuses, naming the service,
    the release and the file to add it to, before anything is written. The catalog as it was before sglang 0.5.23
    was read into it."""
    known = metrics.catalog()
    before = known.model_copy(update={"exporters": {**known.exporters, "sglang": {
        release: entry for release, entry in known.exporters["sglang"].items() if release != "0.5.23"}}})
    monkeypatch.setattr(observability, "catalog", lambda: before)
    text = (PROJECT / "stacks/Pulumi.kpro5.yaml").read_text()
    assert 'version: "0.5.11"' in text
    stack_file = tmp_path / "Pulumi.kpro5.yaml"
    stack_file.write_text(text.replace('version: "0.5.11"', 'version: "0.5.23"'))
    out = tmp_path / "plan"
    assert cli.main(["plan", "kpro5", "--stack-file", str(stack_file), "--out", str(out)]) == 2
    printed = capsys.readouterr()
    assert "gpuhosts:monitoring: service qwen-sglang runs sglang 0.5.23" in printed.err + printed.out
    assert "metrics-catalog.yaml" in printed.err + printed.out and not out.exists()


def test_version_names_the_installed_release():
    from importlib.metadata import version

    result = subprocess.run([sys.executable, "-m", "gpuhosts.cli", "--version"], capture_output=True, text=True,
                            cwd=PROJECT)
    assert result.returncode == 0 and result.stdout.strip() == f"gpuhosts {version('gpuhosts')}"


def test_a_reader_that_stops_reading_ends_the_plan_quietly(tmp_path, monkeypatch):
    """`gpuhosts plan kpro5 | head -1`: a stdout whose reader is gone; the command ends with the error status and
    no traceback (Python ignores SIGPIPE, so a write raises BrokenPipeError)."""
    from gpuhosts.cli import main

    reader, writer = os.pipe()
    os.close(reader)
    closed = os.fdopen(writer, "w", buffering=1)  # a terminal's or a pipe's line at a time
    monkeypatch.setattr(sys, "stdout", closed)
    try:
        assert main(["plan", "kpro5", "--out", str(tmp_path / "plan")]) == 1
    finally:
        closed.close()


@pytest.mark.parametrize("stack", ["kpro5", "trainer"])
def test_a_clean_committed_stack_warns_in_a_few_short_lines_and_keeps_them_whole_in_the_plan(stack, tmp_path):
    result = plan(stack, "--out", str(tmp_path / stack))
    assert result.returncode == 0, result.stderr
    printed = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert 1 <= len(printed) <= 8 and len(set(printed)) == len(printed), printed
    assert max(len(line) for line in printed) <= len("warning: ") + 160, printed
    whole = (tmp_path / stack / "warnings.txt").read_text().splitlines()
    assert all(line.startswith("warning: ") for line in whole) and len(whole) == len(printed) - 1
    for short in printed[:-1]:
        assert any(line.startswith(short.rstrip("…")) for line in whole), short
    verbose = plan(stack, "--out", str(tmp_path / "verbose"), "--verbose")
    assert [line for line in verbose.stderr.splitlines() if line.startswith("warning: ")] == whole
