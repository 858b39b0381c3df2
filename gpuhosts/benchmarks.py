"""Typed configuration of `gpuhosts:benchmarks`: speculative-decoding bake-offs on the GPUs a container's services
share.

A benchmark names the services it compares (they take turns on the same GPUs), a fixed prompt set (short chat,
code, a tool call and one long-context request) and the chat mode every row answers it in, the figures to report, and optionally the DDTree authors' own
benchmark as a reference run on the same GPUs (liranringel/ddtree at a full commit, with a declared patch for the
GDN-hybrid model). Field rules live on the models; rules against the services and the rest of the stack live in
`benchmark_problems`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from gpuhosts.config import NAMESPACE, Problem, _Model, validate_entries
from gpuhosts.engines import driver_for
from gpuhosts.envspec import EnvSpec
from gpuhosts.locks import LOCKS_DIR, RequirementsLock, locked_pins
from gpuhosts.services import SERVICE_NAME, DrafterSpec, Finding, ServiceConfig, repeated_names

DDTREE_REPOSITORY = "https://github.com/liranringel/ddtree"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Patches live in the project, where a pull request shows them; only this folder, only plain names.
PATCH_DIR = "stacks/patches"
PATCH_PATH = re.compile(r"^stacks/patches/[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.patch$")
# liranringel/ddtree requirements.txt at c96427a, less flash-attn (the patch makes it optional), ninja (its C++
# cache compaction falls back to Python without it: ddtree.py `maybe_enable_cpp_compact`) and matplotlib (plots only).
DDTREE_IMPORTS = ("torch", "transformers", "datasets", "loguru", "numpy", "tqdm", "typing-extensions")
# liranringel/ddtree model/utils.py `load_and_process_dataset` at c96427a: the names it loads; anything else raises.
DDTREE_DATASETS = ("gsm8k", "math500", "aime24", "aime25", "alpaca", "mt-bench", "humaneval", "mbpp", "lbpp",
                   "swe-bench", "livecodebench")
MIN_LONG_CONTEXT = 100_000
# DDTree's own environment: a lock per commit and Python resolved from one requirements file (locks/ddtree/), with
# accelerate for the patch's device_map; transformers is the release the patch is written against.
DDTREE_LOCKS = "ddtree"
DDTREE_REQUIREMENTS = f"{DDTREE_LOCKS}/requirements.in"
DDTREE_LOCK_WRITER = "run `python tests/verify_ddtree/run.py --lock` and commit locks/ddtree/"
DDTREE_PACKAGE = "transformers"

SHORT_CHAT = "In three sentences, explain why the sky is blue."
CODE = ("Write a Python function `merge_intervals(intervals)` that merges overlapping closed intervals, with type "
        "hints, a docstring and three doctest examples.")
TOOL_CALL = "What is the weather in Zurich right now, in degrees Celsius? Use the tool."
LONG_QUESTION = "Above are shipping notes. Which code word does the note about the harbour in Bergen give?"


class Measure(str, Enum):
    DECODE = "decodeTokensPerS"
    TTFT = "ttftS"
    ACCEPTANCE_LENGTH = "acceptanceLength"
    ACCEPTANCE_RATE = "acceptanceRate"
    LONG_CONTEXT = "longContextDecodeRatio"


class LongContext(_Model):
    context_tokens: int = Field(
        120_000, ge=MIN_LONG_CONTEXT, le=1_048_576,
        description="Prompt tokens of the long-context request, at least 100000; every service's contextLength must "
                    "hold them plus maxTokens. Default 120000.")
    question: str = Field(LONG_QUESTION, min_length=1, max_length=2000,
                          description="What the long prompt ends with; the rest is generated filler notes.")


class PromptSet(_Model):
    short_chat: str = Field(SHORT_CHAT, min_length=1, max_length=4000, description="A short chat turn.")
    code: str = Field(CODE, min_length=1, max_length=4000, description="A coding request.")
    tool_call: str = Field(TOOL_CALL, min_length=1, max_length=4000,
                           description="A turn answered with a call of the benchmark's `get_weather` tool.")
    long_context: LongContext = Field(LongContext(), description="The long-context request.")
    max_tokens: int = Field(256, ge=16, le=4096, description="Tokens generated per request. Default 256.")


class DDTreePatch(_Model):
    file: str = Field(description="The patch, in the project: stacks/patches/NAME.patch (applied with `git apply`).")
    sha256: str = Field(description="sha256 of the patch file; a changed file must change it too, as a reviewer sees.")

    @field_validator("file")
    @classmethod
    def _file(cls, value: str) -> str:
        if not PATCH_PATH.match(value):
            raise ValueError(f"{value!r} is not a patch of the project; put it in {PATCH_DIR}/NAME.patch")
        return value

    @field_validator("sha256")
    @classmethod
    def _sha(cls, value: str) -> str:
        if not SHA256.match(value):
            raise ValueError(f"{value!r} is not a sha256 (64 lower-case hex digits); `sha256sum` the patch")
        return value


class DDTreeReference(_Model):
    repository: str = Field(DDTREE_REPOSITORY, description="The DDTree authors' repository. Default liranringel/ddtree.")
    commit: str = Field(description="The full 40-hex commit to run; branches move, a commit does not.")
    patch: DDTreePatch = Field(description="The declared patch that makes the reference run the GDN-hybrid target.")
    drafter: DrafterSpec = Field(description="The DFlash drafter DDTree drafts with (`--draft-name-or-path`).")
    environment_of: str | None = Field(
        None,
        description="Default: DDTree's own locked environment (locks/ddtree/<commit[:7]>-py<python>.txt, with "
                    "accelerate for the patch's device_map), installed by a PythonEnv unit of the benchmark; the "
                    "reference then runs on the GPUs and weights of the benchmark's first service. A service of the "
                    "benchmark named here lends its environment instead: its lock must hold what DDTree imports "
                    "(torch, transformers, datasets, loguru, numpy, tqdm), and accelerate for device_map.")
    dataset: str | None = Field(
        None,
        description="Default none: benchmark.py answers the benchmark's own prompts (`--prompts`, the file the "
                    "services' client reads) in the benchmark's chat mode (`--thinking`), as every row of the table "
                    "does. A data set its benchmark.py loads (`--dataset`) instead makes its rows answer that set, "
                    "and the table says so.")
    max_samples: int | None = Field(None, ge=1, le=1000,
                                    description="`--max-samples`, with `dataset` only. Default: the whole set.")
    max_new_tokens: int | None = Field(
        None, ge=16, le=16384,
        description="`--max-new-tokens`. Default: the prompts' maxTokens, so every row generates as many tokens.")
    tree_budgets: tuple[int, ...] = Field((16, 32, 64, 128, 256, 512, 1024),
                                          description="`--tree-budget` values. Default the script's own.")
    temperature: float = Field(0.0, ge=0, le=2, description="`--temperature`. Default 0.")
    python: str = Field("3.12", pattern=r"^3\.\d{1,2}$", description="Python of its environment. Default 3.12.")

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: str) -> str:
        if not re.match(r"^https://[A-Za-z0-9.-]+(/[A-Za-z0-9._-]+){2}$", value):
            raise ValueError(f"{value!r} is not a repository URL (https://host/owner/name)")
        return value

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not COMMIT.match(value):
            raise ValueError(f"{value!r} is not a full commit; give all 40 hex digits (`git rev-parse HEAD`)")
        return value

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str | None) -> str | None:
        if value is not None and value not in DDTREE_DATASETS:
            raise ValueError(f"{value!r} is not a data set DDTree's benchmark.py loads ({', '.join(DDTREE_DATASETS)})")
        return value

    @field_validator("tree_budgets")
    @classmethod
    def _budgets(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or any(b < 1 or b > 4096 for b in value) or len(set(value)) != len(value):
            raise ValueError("must list distinct tree budgets from 1 to 4096")
        return value

    @model_validator(mode="after")
    def _samples(self) -> "DDTreeReference":
        if self.max_samples is not None and self.dataset is None:
            raise ValueError("maxSamples limits a data set, and no dataset is set: the reference answers the "
                             "benchmark's prompts; drop maxSamples or set dataset")
        return self


class BenchmarkConfig(_Model):
    name: str = Field(description="Benchmark name: its unit is ct<vmid>-bench-<name>; results under "
                                  "/var/lib/gpuhosts/benchmarks/ct<vmid>-<name>/ on the host.")
    container: int = Field(description="vmid of the container whose services it compares.")
    services: tuple[str, ...] = Field(description="The services compared, in turn, on the GPUs they share.")
    prompts: PromptSet = Field(PromptSet(), description="The fixed prompt set.")
    # The Qwen3.5/3.6 chat template thinks unless `enable_thinking` is false (its chat_template.jinja), which is
    # what the services answered before the mode was sent explicitly: the default keeps that.
    thinking: bool = Field(
        True,
        description="The chat mode of every row: each service request sends chat_template_kwargs.enable_thinking "
                    "with it, and DDTree's benchmark.py applies the chat template with it. Default true, the "
                    "Qwen3.6 chat template's own default.")
    measure: tuple[Measure, ...] = Field(tuple(Measure), description="The figures to report. Default all.")
    ddtree: DDTreeReference | None = Field(None, description="The DDTree reference run. Default none.")
    run_id: str | None = Field(None, description="Change it to run the benchmark again with unchanged inputs.")
    ready_timeout_s: int = Field(1800, ge=30, description="How long each service may take to answer /health.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SERVICE_NAME.match(value):
            raise ValueError("must be lower-case letters, digits and '-', starting with a letter, e.g. spec-bakeoff")
        return value

    @field_validator("services")
    @classmethod
    def _services(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("must name at least one service to measure")
        if len(set(value)) != len(value):
            raise ValueError("names a service twice")
        return value

    @field_validator("measure")
    @classmethod
    def _measure(cls, value: tuple[Measure, ...]) -> tuple[Measure, ...]:
        if not value:
            raise ValueError(f"must name a figure: {', '.join(m.value for m in Measure)}")
        return tuple(dict.fromkeys(value))

    @field_validator("run_id", mode="before")
    @classmethod
    def _run_id(cls, value: Any) -> Any:
        if value is None:
            return None
        text = str(value)
        if not RUN_ID.match(text):
            raise ValueError(f"{text!r} is not a run id: letters, digits, '.', '_' and '-', up to 64")
        return text

    @model_validator(mode="after")
    def _unit_key(self) -> "BenchmarkConfig":
        # ct<vmid>-bench-<name> is a unit key: 63 characters at most.
        if len(f"ct{self.container}-bench-{self.name}") > 63:
            raise ValueError(f"name {self.name!r} is too long for its unit key; shorten it")
        return self


def _path(index: int, field: str = "") -> str:
    return f"{NAMESPACE}:benchmarks[{index}]" + (f".{field}" if field else "")


def validate_benchmark_entries(raw: Any, problems: list[Problem]) -> list[tuple[int, BenchmarkConfig]]:
    return validate_entries(BenchmarkConfig, raw, "benchmarks", problems)


def patch_digest(project_root: Path, file: str) -> str | None:
    path = project_root / file
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


@dataclass(frozen=True)
class BenchmarkRuleInput:
    """What the benchmark rules read: the entries by their index in `gpuhosts:benchmarks`, the stack's services,
    its containers' vmids, which secret keys it sets, and the project (for its patches)."""
    benchmarks: list[tuple[int, BenchmarkConfig]]
    services: tuple[ServiceConfig, ...]
    vmids: frozenset[int]
    secret_keys: frozenset[str]
    project_root: Path

    def compared(self, bench: BenchmarkConfig) -> list[tuple[int, ServiceConfig]]:
        """The benchmark's services that are declared and run in its container, by their position in it."""
        by_name = {s.name: s for s in self.services}
        return [(position, by_name[name]) for position, name in enumerate(bench.services)
                if name in by_name and by_name[name].container == bench.container]

    def references(self) -> Iterator[tuple[int, BenchmarkConfig, Any]]:
        for index, bench in self.benchmarks:
            if bench.ddtree is not None:
                yield index, bench, bench.ddtree


def benchmark_names_are_unique(given: BenchmarkRuleInput) -> Iterator[Finding]:
    return repeated_names(given.benchmarks, "benchmarks")


def benchmark_containers_are_declared(given: BenchmarkRuleInput) -> Iterator[Finding]:
    for index, bench in given.benchmarks:
        if bench.container not in given.vmids:
            yield index, "container", f"container {bench.container} is not declared in {NAMESPACE}:containers"


def benchmark_services_share_its_container(given: BenchmarkRuleInput) -> Iterator[Finding]:
    by_name = {s.name: s for s in given.services}
    for index, bench in given.benchmarks:
        for position, name in enumerate(bench.services):
            service = by_name.get(name)
            if service is None:
                yield index, f"services[{position}]", (f"{name!r} is not a declared service "
                                                       f"({', '.join(by_name) or 'none'})")
            elif service.container != bench.container:
                yield index, f"services[{position}]", (f"{name!r} runs in container {service.container}, not in "
                                                       f"{bench.container}: a benchmark compares the services of one "
                                                       "container on its GPUs")


def prompts_fit_the_context(given: BenchmarkRuleInput) -> Iterator[Finding]:
    for index, bench in given.benchmarks:
        prompts = bench.prompts
        needed = prompts.long_context.context_tokens + prompts.max_tokens
        for _position, service in given.compared(bench):
            if service.context_length is not None and service.context_length < needed:
                yield index, "prompts.longContext.contextTokens", (
                    f"{prompts.long_context.context_tokens} prompt tokens + maxTokens {prompts.max_tokens} do not fit "
                    f"{name_of(service)}'s contextLength {service.context_length}; lower contextTokens or raise its "
                    "contextLength")


def compared_services_call_tools(given: BenchmarkRuleInput) -> Iterator[Finding]:
    for index, bench in given.benchmarks:
        for position, service in given.compared(bench):
            if service.tool_call_parser is None:
                yield index, f"services[{position}]", (
                    f"{name_of(service)} has no toolCallParser, so the tool-call prompt cannot be answered with a call "
                    "(vLLM refuses `tool_choice: auto` without one); set toolCallParser")


def one_model_is_compared(given: BenchmarkRuleInput) -> Iterator[Finding]:
    for index, bench in given.benchmarks:
        models = {(s.model.repo, s.model.revision, s.model.path) for _, s in given.compared(bench)}
        if len(models) > 1:
            yield index, "services", ("compares services that serve different models or weights ("
                                      + ", ".join(sorted(f"{r}@{v}" for r, v, _ in models))
                                      + "); a bake-off compares one model")


def reference_drafter_has_a_token(given: BenchmarkRuleInput) -> Iterator[Finding]:
    for index, _bench, reference in given.references():
        if reference.drafter.gated and "hfToken" not in given.secret_keys:
            yield index, "ddtree.drafter.gated", (f"{reference.drafter.repo} is gated and {NAMESPACE}:hfToken is not "
                                                  f"set; `pulumi config set --secret {NAMESPACE}:hfToken`")


def reference_environment_is_complete(given: BenchmarkRuleInput) -> Iterator[Finding]:
    """The reference's own environment is locked with what DDTree imports and named apart from every service's;
    or the service whose environment it borrows is one it compares, and has them."""
    by_name = {s.name: s for s in given.services}
    for index, bench, reference in given.references():
        if reference.environment_of is None:
            lock = ddtree_lock(reference)
            reason = lock.missing(lock.path().read_text() if lock.path().is_file() else None)
            if reason:
                others = sorted(p.name for p in (LOCKS_DIR / DDTREE_LOCKS).glob(f"{reference.commit[:7]}-py*.txt"))
                field = "ddtree.python" if others else "ddtree.commit"
                also = f" (locked for: {', '.join(others)})" if others else ""
                yield index, field, f"{reason}{also}; {DDTREE_LOCK_WRITER}"
            else:
                pins = {pin.split("==")[0] for pin in locked_pins(lock.path().read_text())}
                lacking = [name for name in (*DDTREE_IMPORTS, "accelerate") if name not in pins]
                if lacking:
                    yield index, "ddtree.commit", (
                        f"locks/{lock.name} lacks {', '.join(lacking)}, which DDTree's benchmark.py and the patch's "
                        f"device_map need; add them to locks/{DDTREE_REQUIREMENTS} and {DDTREE_LOCK_WRITER}")
            env_name = ddtree_env_name(bench)
            if any(s.name == env_name and s.container == bench.container for s in given.services):
                yield index, "name", (f"the reference's environment /opt/gpuhosts/{env_name} is also the environment "
                                      f"of service {env_name}; rename the benchmark or the service")
        elif reference.environment_of not in bench.services:
            yield index, "ddtree.environmentOf", (f"{reference.environment_of!r} is not one of this benchmark's "
                                                  f"services ({', '.join(bench.services)})")
        elif reference.environment_of in by_name:
            lacking = environment_lacks(by_name[reference.environment_of], DDTREE_IMPORTS)
            if lacking:
                yield index, "ddtree.environmentOf", (
                    f"the environment of {reference.environment_of} lacks {', '.join(lacking)}, which DDTree's "
                    "benchmark.py imports; name a service whose lock holds them")


def reference_patch_is_reviewed(given: BenchmarkRuleInput) -> Iterator[Finding]:
    for index, _bench, reference in given.references():
        actual = patch_digest(given.project_root, reference.patch.file)
        if actual is None:
            yield index, "ddtree.patch.file", (f"{reference.patch.file} does not exist in the project; add the patch "
                                               "there")
        elif actual != reference.patch.sha256:
            yield index, "ddtree.patch.sha256", (f"is {reference.patch.sha256[:12]}…, but {reference.patch.file} has "
                                                 f"sha256 {actual}; review the patch and put in its digest")


def reference_drafter_directory_is_its_own(given: BenchmarkRuleInput) -> Iterator[Finding]:
    for index, bench, reference in given.references():
        for other in given.services:
            drafter = other.speculative.drafter
            if (other.container == bench.container and drafter is not None and drafter.path == reference.drafter.path
                    and (drafter.repo, drafter.revision) != (reference.drafter.repo, reference.drafter.revision)):
                yield index, "ddtree.drafter.localDir", (
                    f"{drafter.path} is also {other.name}'s drafter directory with {drafter.repo}@{drafter.revision}; "
                    "give the same repo and revision, or another localDir")


# The rules of the benchmarks against the stack's containers and services and the project's patches, in the order
# their problems are listed.
BENCHMARK_RULES = (benchmark_names_are_unique, benchmark_containers_are_declared,
                   benchmark_services_share_its_container, prompts_fit_the_context, compared_services_call_tools,
                   one_model_is_compared, reference_drafter_has_a_token, reference_environment_is_complete,
                   reference_patch_is_reviewed, reference_drafter_directory_is_its_own)


def benchmark_problems(benchmarks: list[tuple[int, BenchmarkConfig]], services: tuple[ServiceConfig, ...],
                       vmids: set[int], secret_keys: set[str], project_root: Path) -> list[Problem]:
    """Every rule of BENCHMARK_RULES over the stack's benchmarks."""
    given = BenchmarkRuleInput(benchmarks, services, frozenset(vmids), frozenset(secret_keys), project_root)
    return [Problem(path=_path(index, field), message=message)
            for rule in BENCHMARK_RULES for index, field, message in rule(given)]


def benchmark_warnings(benchmarks: list[tuple[int, BenchmarkConfig]], services: tuple[ServiceConfig, ...],
                       project_root: Path) -> list[str]:
    """What a valid benchmark will meet on the host: a patch that loads the target with `device_map`, which
    transformers runs through accelerate (transformers 5.6.0 modeling_utils `from_pretrained` refuses a device_map
    without it), over an environment whose lock has no accelerate."""
    found = []
    by_name = {s.name: s for s in services}
    for index, bench in benchmarks:
        reference = bench.ddtree
        if reference is None or reference.environment_of not in by_name:
            continue
        path = project_root / reference.patch.file
        added = [line for line in path.read_text().splitlines() if line.startswith("+")] if path.is_file() else []
        if any("device_map" in line for line in added) and environment_lacks(by_name[reference.environment_of],
                                                                           ("accelerate",)):
            found.append(f"{_path(index, 'ddtree.environmentOf')}: {reference.patch.file} loads the target with "
                         f"device_map, which needs accelerate, and the environment of {reference.environment_of} has "
                         "none: the reference job fails at loading until an environment with accelerate runs it")
    return found


def ddtree_lock(reference: DDTreeReference) -> RequirementsLock:
    return RequirementsLock(name=f"{DDTREE_LOCKS}/{reference.commit[:7]}-py{reference.python}.txt",
                            requirements=DDTREE_REQUIREMENTS, python=reference.python, writer=DDTREE_LOCK_WRITER)


def ddtree_env_name(bench: BenchmarkConfig) -> str:
    return f"ddtree-{bench.name}"


def ddtree_env(bench: BenchmarkConfig) -> EnvSpec | None:
    """DDTree's own environment for `bench`, or None when a service lends its environment (`environmentOf`). Its
    package is the transformers release the lock pins: the release the patch is written against, which the
    environment's probe reads from the venv's dist-info like every other pin."""
    reference = bench.ddtree
    if reference is None or reference.environment_of is not None:
        return None
    lock = ddtree_lock(reference)
    text = lock.path().read_text() if lock.path().is_file() else ""
    release = next((pin.split("==", 1)[1] for pin in locked_pins(text) if pin.startswith(f"{DDTREE_PACKAGE}==")), "")
    return EnvSpec(name=ddtree_env_name(bench), requirement=f"DDTree {reference.commit[:7]} (locks/{DDTREE_REQUIREMENTS})",
                   package=DDTREE_PACKAGE, release=release, from_git=False, python=reference.python,
                   needs_hf=False, requirements_lock=lock)


def environment_lacks(service: ServiceConfig, packages: tuple[str, ...]) -> list[str]:
    """The packages the committed lock of the service's environment does not pin; none when it has no lock: the
    lock rules refuse that, naming the service's own field (gpuhosts/stacks.py `require_locks`)."""
    lock = driver_for(service.engine).install(service).lock
    path = lock.path() if lock is not None else None
    if path is None or not path.is_file():
        return []
    pinned = set(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", path.read_text(), re.M))
    pinned = {name.lower().replace("_", "-") for name in pinned}
    return [name for name in packages if name not in pinned]


def name_of(service: ServiceConfig) -> str:
    return f"service {service.name}"


def referenced_benchmark_secrets(raw: Any) -> set[str]:
    """hfToken, when a raw `gpuhosts:benchmarks` value's DDTree drafter is gated."""
    for entry in raw if isinstance(raw, list) else []:
        reference = entry.get("ddtree") if isinstance(entry, dict) else None
        drafter = reference.get("drafter") if isinstance(reference, dict) else None
        if isinstance(drafter, dict) and drafter.get("gated") is True:
            return {"hfToken"}
    return set()
