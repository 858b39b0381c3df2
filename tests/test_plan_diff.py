"""`gpuhosts diff`: the review of a change between two plans, in the summary's words, and its pull request comment."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuhosts import cli, diff
from gpuhosts.plan import SECRET_PLACEHOLDER, write_plan

from conftest import PROJECT

CIPHER_OLD = "v1:AAAAold-ciphertext-of-the-token"
CIPHER_NEW = "v1:BBBBnew-ciphertext-of-the-token"


def _stack(name: str) -> dict:
    return yaml.safe_load((PROJECT / "stacks" / f"Pulumi.{name}.yaml").read_text())


def _service(config: dict, name: str) -> dict:
    return next(s for s in config["gpuhosts:services"] if s["name"] == name)


def port(config):
    _service(config, "qwen-sglang")["port"] = 30001


def gate_threshold(config):
    _service(config, "qwen-sglang")["gate"]["minAcceptanceLength"] = 2.5


def driver_bump(config):
    config["gpuhosts:nvidia"]["version"] = "580.159.04"


def gpu_to_vfio(config):
    config["gpuhosts:gpus"][3] = {"address": "0000:61:00.0", "model": "RTX A6000", "use": "vfio"}
    for service in config["gpuhosts:services"]:
        service["gpus"], service["tensorParallelSize"] = ["0000:41:00.0"], 1


def no_restart(config):
    config["gpuhosts:containers"][0]["allowRestart"] = False


def allow_reboot(config):
    config["gpuhosts:host"]["allowReboot"] = True


def remove_vllm(config):
    config["gpuhosts:services"] = [s for s in config["gpuhosts:services"] if s["name"] != "qwen-vllm-dflash"]
    # The bake-off compares it: it goes with it.
    config.pop("gpuhosts:benchmarks", None)


def token(cipher):
    def set_token(config):
        config["gpuhosts:hfToken"] = {"secure": cipher}
    return set_token


def flip_services(config):
    for service in config["gpuhosts:services"]:
        service["enabled"] = not service.get("enabled", True)


def trainer_port(config):
    config["gpuhosts:training"].setdefault("server", {})["port"] = 8001


def both(*edits):
    def apply(config):
        for edit in edits:
            edit(config)
    return apply


class Plans:
    """Plan folders of modified stacks, each written once per module by the real write_plan."""

    def __init__(self, root: Path):
        self.root, self.made = root, {}

    def __call__(self, stack: str, *edits) -> Path:
        key = (stack, *(e.__name__ + str(id(e)) for e in edits))
        if key not in self.made:
            document = copy.deepcopy(_stack(stack))
            for edit in edits:
                edit(document["config"])
            folder = self.root / f"plan{len(self.made)}"
            stack_file = self.root / f"stack{len(self.made)}.yaml"
            stack_file.write_text(yaml.safe_dump(document))
            write_plan(PROJECT, stack, stack_file, folder)
            self.made[key] = folder
        return self.made[key]


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    return Plans(tmp_path_factory.mktemp("plans"))


def run(*args: str) -> tuple[int, str, str]:
    result = subprocess.run([sys.executable, "-m", "gpuhosts.cli", "diff", *args], capture_output=True, text=True,
                            cwd=PROJECT)
    return result.returncode, result.stdout, result.stderr


def summary_part(text: str) -> str:
    """The review without its unified diffs."""
    return text.split("\n--- base ", 1)[0]


TOKEN_OLD, TOKEN_NEW = token(CIPHER_OLD), token(CIPHER_NEW)

CASES = [
    # (id, stack, base edits, head edits, what the review says, what it must not say)
    ("one port", "kpro5", (), (port,),
     ["~ ct129-service-qwen-sglang", "service ct129 qwen-sglang:", "argv: after --port 30000 → 30001",
      "listen: 0.0.0.0:30000 → 0.0.0.0:30001", "reboot: not expected", "container restarts: none",
      "+++ head CT 129:/etc/systemd/system/gpuhosts-qwen-sglang.service", "+    --port 30001 \\",
      "`pulumi up` then:",
      "ct129-service-qwen-sglang: restarts gpuhosts-qwen-sglang.service in CT 129 with its new settings",
      "ct129-gate-qwen-sglang: measures gpuhosts-qwen-sglang.service in CT 129 again once it answers",
      "ct129-bench-spec-bakeoff: the benchmark spec-bakeoff runs again, as its inputs changed with "
      "ct129-gate-qwen-sglang, ct129-service-qwen-sglang: on CT 129's GPUs 0000:41:00.0, 0000:61:00.0 it runs "
      "qwen-sglang, qwen-vllm-dflash one at a time, stopping every other service on those GPUs while each is "
      "measured, then puts them back as declared (qwen-sglang running, qwen-vllm-dflash stopped)"],
     ["WARNING", "GPU assignment", "does not run"]),
    # One setting changed: the review names it and its two values, never the whole gate settings twice.
    ("a gate threshold", "kpro5", (), (gate_threshold,),
     ["service ct129 qwen-sglang:", "    gate.min_acceptance_length: 2.0 → 2.5", "~ ct129-gate-qwen-sglang"],
     ['gate: {"']),
    ("the services flipped", "kpro5", (), (flip_services,),
     ["ct129-service-qwen-sglang: stops gpuhosts-qwen-sglang.service in CT 129",
      "ct129-service-qwen-vllm-dflash: starts gpuhosts-qwen-vllm-dflash.service in CT 129",
      "ct129-gate-qwen-vllm-dflash: measures gpuhosts-qwen-vllm-dflash.service in CT 129 once it answers",
      "then puts them back as declared (qwen-sglang stopped, qwen-vllm-dflash running)"], ["restarts gpuhosts"]),
    ("driver bump", "kpro5", (), (driver_bump,),
     ["~ nvidia-driver", "reboot: expected but not done (allowReboot: false)", "nvidia-driver (loaded module)",
      "driver.version: 580.126.09 → 580.159.04", "containers.129.userspace: 580.126.09 → 580.159.04"],
     ["container restarts: CT"]),
    ("driver bump with allowReboot", "kpro5", (allow_reboot,), (allow_reboot, driver_bump),
     ["reboot: expected: the host reboots during `pulumi up` (allowReboot: true)"], ["not done"]),
    ("GPU to vfio", "kpro5", (), (gpu_to_vfio,),
     ["GPU assignment:", "0000:61:00.0: RTX A6000: CT 129 → RTX A6000: vfio-pci (for VMs)",
      "reboot: expected but not done", "vfio-binding (file /etc/modprobe.d/gpuhosts-vfio.conf",
      "CT 129 restarts (allowRestart: true) — ct129-gpu-devices changed",
      "environment: CUDA_VISIBLE_DEVICES: 0,1 → 0", "argv: after --tp-size 2 → 1"], []),
    ("GPU to vfio, no restart allowed", "kpro5", (no_restart,), (no_restart, gpu_to_vfio),
     ["CT 129 restart pending (allowRestart: false"], ["CT 129 restarts"]),
    ("service removed", "kpro5", (), (remove_vllm,),
     ["- ct129-service-qwen-vllm-dflash: WARNING its teardown undoes: service qwen-vllm-dflash "
      "(gpuhosts-qwen-vllm-dflash.service) stopped and removed from CT 129",
      "- ct129-model-qwen3-6-27b-dflash: WARNING its teardown undoes: weights of z-lab/Qwen3.6-27B-DFlash in "
      "/srv/models/Qwen3.6-27B-DFlash on CT 129 kept (deleteOnDestroy is false)",
      "- ct129-env-qwen-vllm-dflash: WARNING", "service ct129 qwen-vllm-dflash:", "service removed",
      "gpuhosts:hfToken no longer read by this host's units"], []),
    ("secret rotated", "kpro5", (TOKEN_OLD,), (TOKEN_NEW,),
     ["ct129-model-qwen3-6-27b-dflash: its secret gpuhosts:hfToken changed",
      "gpuhosts:hfToken changed (its encrypted value in the stack file differs)"],
     [CIPHER_OLD, CIPHER_NEW, "AAAAold", "BBBBnew", SECRET_PLACEHOLDER]),
    ("trainer server port", "trainer", (), (trainer_port,),
     ["service hidden-state server:", "argv: after --port 8000 → 8001", "url: http://127.0.0.1:8000 → "
      "http://127.0.0.1:8001", "~ hidden-state-server", "reboot: not expected",
      "hidden-state-server: restarts gpuhosts-hidden-state-server.service with its new settings",
      "dflash-training: restarts gpuhosts-dflash-training.service with its new settings"], ["WARNING", "CT "]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_review_names_the_change_in_the_summarys_words(plans, case):
    _, stack, base_edits, head_edits, says, never = case
    code, out, err = run(str(plans(stack, *base_edits)), str(plans(stack, *head_edits)))
    assert code == diff.EXIT_CHANGES, err
    for text in says:
        assert text in out
    for text in never:
        assert text not in out + err


def test_no_change_exits_0_and_says_so(plans):
    code, out, _ = run(str(plans("kpro5")), str(plans("kpro5")))
    assert (code, out) == (0, "stack kpro5: no change\nhost kpro5: no change\n")


def test_one_changed_port_is_a_short_review_beside_diff_r(plans):
    base, head = plans("kpro5"), plans("kpro5", port)
    _, out, _ = run(str(base), str(head))
    recursive = subprocess.run(["diff", "-r", str(base), str(head)], capture_output=True, text=True).stdout
    summary = summary_part(out)
    # The words a reviewer reads first fit on a screen and are a fraction of what diff -r prints.
    assert len(summary.splitlines()) <= 16 and len(summary) * 4 < len(recursive)
    # The unified diffs are only the files that changed: the unit file and the two scripts that carry it, the
    # gate's probe, which reads the service's new address, the bake-off's script, whose inputs are the
    # services' (it measures again), and Prometheus's scrape targets of the engines with the script that writes them.
    assert out.count("\n--- base ") == 7 and out.startswith("stack kpro5: changes")


def test_a_removed_stack_warns_what_each_teardown_undoes_with_the_gpus_and_vmids(plans):
    reviews = [diff.review_stack("kpro5", diff.load_plan(plans("kpro5")), diff.NO_PLAN)]
    text = diff.render_text(reviews)
    assert "host kpro5: host removed from the stack (every unit's teardown runs)" in text
    for words in ("vfio-binding: WARNING its teardown undoes: RTX 3090 0000:01:00.0, RTX 3090 0000:21:00.0 returned "
                  "from vfio-pci to the driver each had before (nvidia where it is installed)",
                  "nvidia-driver: WARNING its teardown undoes: NVIDIA driver 580.126.09 uninstalled",
                  "ct129-gpu-devices: WARNING its teardown undoes: devN entries naming the nodes gpuhosts gives "
                  "removed from CT 129",
                  "ct129-service-qwen-sglang: WARNING its teardown undoes: service qwen-sglang",
                  "CT 129 restarts (allowRestart: true) — ct129-gpu-devices removed"):
        assert words in text


def _huge_head(plans, tmp_path) -> Path:
    head = tmp_path / "huge"
    shutil.copytree(plans("kpro5", remove_vllm), head)
    unit_file = head / "hosts/kpro5/containers/129/etc/systemd/system/gpuhosts-qwen-sglang.service"
    unit_file.write_text("".join(f"# line {n} ``` of a much longer unit\n" for n in range(40_000)))
    return head


def test_markdown_keeps_the_summary_whole_and_stays_within_the_comment_limit(plans, tmp_path):
    base = diff.load_plan(plans("kpro5"))
    head = diff.load_plan(_huge_head(plans, tmp_path))
    reviews = [diff.review_stack("kpro5", base, head), diff.review_stack("kpro5-again", base, head)]
    document = diff.render_markdown(reviews)
    assert len(document) <= diff.COMMENT_LIMIT
    assert document.startswith(diff.PREVIEW_MARKER + "\n")
    for review in reviews:
        assert diff._md_summary(review) in document
    assert "cut here: the comment limit of 65536 characters" in document
    assert "left out: the comment limit" in document
    # Every collapsible block is closed, and the fence outgrows the backticks inside the file.
    assert document.count("<details>") == document.count("</details>")
    assert "\n````diff\n" in document


def test_markdown_of_a_small_change_is_whole(plans):
    reviews = [diff.review_stack("kpro5", diff.load_plan(plans("kpro5")), diff.load_plan(plans("kpro5", port)))]
    document = diff.render_markdown(reviews)
    assert document.startswith("<!-- gpuhosts-preview -->\n## gpuhosts preview\n\nChanges in `kpro5`.")
    assert "cut here" not in document and "left out" not in document
    assert "<details><summary>kpro5: files and scripts — 7 changed, 0 new, 0 removed</summary>" in document
    assert "  - argv: after --port 30000 → 30001" in document


EXIT_CASES = [
    ("no change", lambda p, t: [p("kpro5"), p("kpro5")], 0, ""),
    ("a change", lambda p, t: [p("kpro5"), p("kpro5", port)], 3, ""),
    ("a missing folder", lambda p, t: [t / "absent", p("kpro5")], 1, "absent: no such folder"),
    ("not a plan", lambda p, t: [t, p("kpro5")], 1, "not a gpuhosts plan"),
    ("one folder", lambda p, t: [p("kpro5")], 2, "give two plan folders"),
    ("an unknown option", lambda p, t: [p("kpro5"), p("kpro5"), "--colour"], 2, "unrecognized arguments"),
    ("a bad stack name", lambda p, t: ["../x", "--base", "HEAD"], 2, "is not a stack name"),
    ("a bad ref", lambda p, t: ["kpro5", "--base", "no-such-ref-anywhere"], 1, "--base no-such-ref-anywhere: not a commit"),
    # A stack on neither side is a misspelt name: an error, never "no change" (nor "changes", which passes CI).
    ("an unknown stack", lambda p, t: ["kpro5", "kpro9", "--base", "HEAD"], 1,
     "unknown stack kpro9: no stacks/Pulumi.kpro9.yaml at "),
]


@pytest.mark.parametrize("case", EXIT_CASES, ids=[c[0] for c in EXIT_CASES])
def test_exit_codes(plans, tmp_path, capsys, case):
    _, args, code, message = case
    assert cli.main(["diff", *map(str, args(plans, tmp_path))]) == code
    assert message in capsys.readouterr().err


def _unit(kind: str, order: int, desired: dict, needs=(), needed_by=()) -> dict:
    return {"kind": kind, "applyOrder": order, "desired": desired, "needs": list(needs), "neededBy": list(needed_by)}


SERVICE_FILE = "file /etc/systemd/system/gpuhosts-chat.service"


def _host(service_state: str, service_file: str, gate_script: str = "gate v1") -> diff.HostPlan:
    """A host of one service, its gate and a benchmark of it and a stopped twin on the same two GPUs."""
    units = {
        "ct200-service-chat": _unit("InferenceService", 1, {SERVICE_FILE: service_file,
                                                             "systemd gpuhosts-chat.service": service_state},
                                    needed_by=["ct200-gate-chat", "ct200-bench-ab"]),
        "ct200-service-twin": _unit("InferenceService", 2, {"systemd gpuhosts-twin.service": "disabled inactive"},
                                    needed_by=["ct200-bench-ab"]),
        "ct200-gate-chat": _unit("DeployGate", 3, {}, needs=["ct200-service-chat"]),
        # The digest of the benchmark's inputs: the services' units, as the plan makes it.
        "ct200-bench-ab": _unit("Benchmark", 4, {"results /var/lib/x": f"{service_file} {service_state}"},
                                needs=["ct200-service-chat", "ct200-service-twin"]),
    }
    services = {"chat": {"unit": "gpuhosts-chat.service", "enabled": "active" in service_state.split(),
                         "gpus": ["0000:41:00.0", "0000:61:00.0"]},
                "twin": {"unit": "gpuhosts-twin.service", "enabled": False, "gpus": ["0000:61:00.0", "0000:41:00.0"]}}
    desired = {"containers": {"200": {"services": services,
                                      "benchmarks": {"ab": {"unit": "ct200-bench-ab", "services": ["chat", "twin"]}}}}}
    scripts = {"commands/ct200-gate-chat/ensure.sh": gate_script}
    return diff.HostPlan(desired, units, scripts, {})


ACTIONS = {
    # (base, head) -> what `pulumi up` then does, in apply order
    "a new unit file restarts the running service; its gate is unchanged and does not measure": (
        _host("enabled active", "sha256:a"), _host("enabled active", "sha256:b"),
        ["ct200-service-chat: restarts gpuhosts-chat.service in CT 200 with its new settings (down until it is up "
         "again)",
         "ct200-gate-chat: does not run (its inputs are unchanged), so the restarted gpuhosts-chat.service is not "
         "measured again",
         "ct200-bench-ab: the benchmark ab runs again, as its inputs changed with ct200-service-chat: on CT 200's GPUs "
         "0000:41:00.0, 0000:61:00.0 it runs chat, twin one at a time, stopping every other service on those GPUs "
         "while each is measured, then puts them back as declared (chat running, twin stopped)"]),
    "a changed gate measures again": (
        _host("enabled active", "sha256:a"), _host("enabled active", "sha256:a", gate_script="gate v2"),
        ["ct200-gate-chat: measures gpuhosts-chat.service in CT 200 again once it answers; `pulumi up` fails below "
         "the gate's thresholds"]),
    "a service switched off stops": (
        _host("enabled active", "sha256:a"), _host("disabled inactive", "sha256:a"),
        ["ct200-service-chat: stops gpuhosts-chat.service in CT 200",
         "ct200-bench-ab: the benchmark ab runs again, as its inputs changed with ct200-service-chat: on CT 200's GPUs "
         "0000:41:00.0, 0000:61:00.0 it runs chat, twin one at a time, stopping every other service on those GPUs "
         "while each is measured, then puts them back as declared (chat stopped, twin stopped)"]),
    "a stopped service's new file keeps it stopped": (
        _host("disabled inactive", "sha256:a"), _host("disabled inactive", "sha256:b"),
        ["ct200-service-chat: rewrites gpuhosts-chat.service in CT 200, which stays stopped",
         "ct200-bench-ab: the benchmark ab runs again, as its inputs changed with ct200-service-chat: on CT 200's GPUs "
         "0000:41:00.0, 0000:61:00.0 it runs chat, twin one at a time, stopping every other service on those GPUs "
         "while each is measured, then puts them back as declared (chat stopped, twin stopped)"]),
    "nothing changed, nothing runs": (_host("enabled active", "sha256:a"), _host("enabled active", "sha256:a"), []),
}


@pytest.mark.parametrize("case", ACTIONS, ids=list(ACTIONS))
def test_what_up_does_follows_from_which_units_change_and_what_needs_them(case):
    base, head, says = ACTIONS[case]
    review = diff.review_host("h", base, head)
    assert review.actions == says
    assert ("  `pulumi up` then:" in diff.summary_lines(review)) == bool(says)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=gpuhosts test", "-c", "user.email=test@example.org",
                    *args], check=True, capture_output=True)


def test_base_plans_both_sides_from_git_with_a_stack_missing_at_base(tmp_path, capsys):
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(PROJECT), str(repo)], check=True)
    kpro6 = (repo / "stacks" / "Pulumi.kpro6.yaml").read_text()
    _git(repo, "rm", "-q", "stacks/Pulumi.kpro6.yaml")
    _git(repo, "commit", "-q", "-m", "base without kpro6")
    (repo / "stacks" / "Pulumi.kpro6.yaml").write_text(kpro6)
    stack_file = repo / "stacks" / "Pulumi.kpro5.yaml"
    stack_file.write_text(stack_file.read_text().replace("port: 30000", "port: 30001"))
    _git(repo, "add", "stacks")
    _git(repo, "commit", "-q", "-m", "qwen-sglang on port 30001, kpro6 back")
    out = tmp_path / "preview.md"
    # As the pull request workflow calls it, with the clone's own code for both sides.
    code = diff.main(["kpro5", "trainer", "kpro6", "--base", "HEAD~1", "--markdown", "--out", str(out)],
                     cli.STACK_NAME, root=repo)
    assert code == diff.EXIT_CHANGES, capsys.readouterr().err
    document = out.read_text()
    assert document.startswith("<!-- gpuhosts-preview -->\n") and len(document) <= diff.COMMENT_LIMIT
    kpro5, trainer, kpro6 = (document.split(f"### Stack `{s}`", 1)[1].split("### Stack", 1)[0]
                             for s in ("kpro5", "trainer", "kpro6"))
    assert "  - listen: 0.0.0.0:30000 → 0.0.0.0:30001" in kpro5
    assert trainer.startswith(": no change")
    assert kpro6.startswith(": changes — new stack: no stacks/Pulumi.kpro6.yaml at ")
    assert "new host (every unit is created)" in kpro6 and "  - + vfio-binding" in kpro6
    # The base came from git archive: the repository has no extra worktree to clean up.
    worktrees = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert len(worktrees.splitlines()) == 1
