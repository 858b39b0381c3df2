"""Benchmark: a speculative-decoding bake-off on the GPUs a container's services share.

The unit runs on the host. Inside the container it measures each listed service in turn — every other service on
those GPUs stopped first, the service started, /health awaited, the fixed prompts sent (gpuhosts/plans/
bench_probe.py) — then runs the DDTree reference job with the authors' own benchmark.py, and in every case, also
after a failure, puts each service on those GPUs back in its declared state. The table goes into the result's
report (the stack output `benchmarks`) and into results.json and results.md under
/var/lib/gpuhosts/benchmarks/ct<vmid>-<name>/ on the host. It runs again only when its inputs change (the
services' units, the prompts, the figures, the DDTree commit and patch, `runId`) or when `gpuhosts bench` asks.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from gpuhosts.benchmarks import BenchmarkConfig, DDTreeReference, ddtree_env
from gpuhosts.config import StackConfig
from gpuhosts.engines import driver_for
from gpuhosts.facts import Fact, desired, files_facts, render_probe
from gpuhosts.hostside import bench_probe
from gpuhosts.locks import lock_digest, lock_text
from gpuhosts.plans import ddtree_reference
from gpuhosts.plans.deploy_gate import gate_key, gate_settings
from gpuhosts.plans.gate_script import GATE_SCRIPT
from gpuhosts.plans.inference_service import (
    engine_environment,
    environment_file,
    secret_variable,
    service_key,
)
from gpuhosts.render import PROJECT_ROOT, HostFile, render
from gpuhosts.services import ServiceConfig
from gpuhosts.units import Unit

RESULTS_ROOT = "/var/lib/gpuhosts/benchmarks"
SCRIPTS_ROOT = "/usr/local/lib/gpuhosts/benchmarks"


def benchmark_key(bench: BenchmarkConfig) -> str:
    return f"ct{bench.container}-bench-{bench.name}"


def results_dir(bench: BenchmarkConfig) -> str:
    return f"{RESULTS_ROOT}/ct{bench.container}-{bench.name}"


def script_dir(bench: BenchmarkConfig) -> str:
    return f"{SCRIPTS_ROOT}/{bench.name}"


def bench_script(bench: BenchmarkConfig) -> HostFile:
    path = f"{script_dir(bench)}/bench.py"
    return HostFile(path, render("benchmark/bench.py.j2", path=path,
                                 source=Path(bench_probe.__file__).read_text().rstrip("\n")), "0755")


def bench_prompts(bench: BenchmarkConfig, path: str) -> dict[str, Any]:
    """The bake-off's prompts as every row answers them: each prompt's chat messages (and the tools of the tool
    call), and the chat mode. The services' client and DDTree's benchmark.py read this one document; the
    long-context request is the services' alone (it is sized against each engine's own token counts, and DDTree
    reports no decode rate to compare it with), so it sits apart from `prompts`."""
    prompts = bench.prompts

    def user(name: str, text: str, tools: list | None = None) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": name, "messages": [{"role": "user", "content": text}]}
        return entry if tools is None else {**entry, "tools": tools}

    return {
        "managedBy": f"managed by gpuhosts: benchmark {bench.name}'s prompts ({path}); every row of its table "
                     "answers them in this chat mode",
        "thinking": bench.thinking,
        "maxTokens": prompts.max_tokens,
        "prompts": [user("shortChat", prompts.short_chat), user("code", prompts.code),
                    user("toolCall", prompts.tool_call, [bench_probe.WEATHER_TOOL])],
        "longContext": {"contextTokens": prompts.long_context.context_tokens,
                        "question": prompts.long_context.question},
    }


def prompts_file(bench: BenchmarkConfig) -> HostFile:
    path = f"{script_dir(bench)}/prompts.json"
    text = json.dumps(bench_prompts(bench, path), indent=1, ensure_ascii=False)
    return HostFile(path, render("benchmark/prompts.json.j2", text=text))


def python_of(service: ServiceConfig) -> str:
    """The Python of the service's engine install: the client measures the service with it, and the reference job
    runs in it."""
    return driver_for(service.engine).install(service).interpreter


def overlapping(services: list[ServiceConfig], gpus: set[str]) -> list[ServiceConfig]:
    return [s for s in services if gpus & set(s.gpus)]


def run_settings(bench: BenchmarkConfig, service: ServiceConfig) -> dict[str, Any]:
    """What the client needs to measure one service (no secret: the key is read from its EnvironmentFile)."""
    gate = gate_settings(service)
    return {
        "service": service.name, "engine": service.engine.name, "method": service.speculative.method.value,
        "base_url": gate["base_url"], "model": gate["model"], "reasoning_field": gate["reasoning_field"],
        "acceptance_metrics": gate["acceptance_metrics"], "speculative": gate["speculative"],
        "ready_timeout_s": bench.ready_timeout_s, "prompts_file": prompts_file(bench).path,
    }


def container_command(words: list[tuple[str, bool]]) -> list[dict[str, Any]]:
    """A command line for the container's shell, word by word: templates/benchmark/inner.sh.j2 quotes each word
    with `q` and puts a container path (`path`) under "$root"."""
    return [{"word": word, "path": path} for word, path in words]


def client_command(bench: BenchmarkConfig, service: ServiceConfig, command: str) -> list[dict[str, Any]]:
    """`bench.py run|wait` for one service, with that service's own Python; the key file by name only."""
    words = [(python_of(service), True), (bench_script(bench).path, True), (command, False),
             (GATE_SCRIPT, True), (json.dumps(run_settings(bench, service), sort_keys=True), False)]
    env_file = environment_file(service)
    return container_command(words + ([(env_file, True), (secret_variable(service), False)] if env_file else []))


def ddtree_job(bench: BenchmarkConfig, config: StackConfig, by_name: dict[str, ServiceConfig]) -> dict[str, Any] | None:
    """The DDTree reference job: its command, working directory, GPUs and output files, for the inner script."""
    reference: DDTreeReference | None = bench.ddtree
    if reference is None:
        return None
    # The weights and GPUs are those of the lending service, or of the first compared one (all serve one model).
    service = by_name[reference.environment_of or bench.services[0]]
    own = ddtree_env(bench)
    python = own.interpreter if own is not None else python_of(service)
    work = f"{results_dir(bench)}/ddtree"
    save = f"{work}/run.pt"
    argv = ddtree_reference.ddtree_job_argv(bench, python, service.model.path, save, prompts_file(bench).path)
    return {"argv": argv, "cwd": ddtree_reference.ddtree_checkout(bench.container, bench), "save": save,
            "python": python, "cuda": engine_environment(service, config)["CUDA_VISIBLE_DEVICES"],
            # A regenerated lock of its own environment runs the reference again.
            "lock": None if own is None else lock_digest(lock_text(own.requirements_lock)),
            "result_script": f"{script_dir(bench)}/ddtree-result.py", "log": f"{work}/benchmark.log",
            "out": f"{work}/result.json"}


def ddtree_files(bench: BenchmarkConfig) -> list[HostFile]:
    if bench.ddtree is None:
        return []
    shipped = ddtree_reference.render_ddtree_result_script()
    return [HostFile(f"{script_dir(bench)}/ddtree-result.py", shipped.content, shipped.mode)]


def inputs_digest(bench: BenchmarkConfig, runs: list[dict[str, Any]], job: dict[str, Any] | None,
                  service_digests: dict[str, str], files: list[HostFile]) -> str:
    """Everything a rerun depends on: the services' units as deployed, the settings, the reference, runId."""
    reference = None if bench.ddtree is None else bench.ddtree.model_dump(mode="json", by_alias=True)
    document = {"runs": runs, "ddtree": reference, "job": job, "services": service_digests,
                "measure": [m.value for m in bench.measure], "runId": bench.run_id,
                "files": {f.path: hashlib.sha256(f.content.encode()).hexdigest() for f in files}}
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32]


def plan_benchmark(bench: BenchmarkConfig, config: StackConfig, service_units: dict[str, Unit],
                   reference_units: tuple[str, ...] = (), *, force: bool = False) -> Unit:
    """The benchmark unit of `bench`. It waits for the service units on its GPUs (their state is what it restores),
    their gates, and `reference_units` (the DDTree checkout and drafter); `force` renders the variant
    `gpuhosts bench` runs (same inputs digest)."""
    container_services = config.services_in(bench.container)
    by_name = {s.name: s for s in container_services}
    compared = [by_name[name] for name in bench.services]
    gpus = {address for s in compared for address in s.gpus}
    runs = []
    for service in compared:
        runs.append({"service": service.name, "unit": service.unit_name, "engine": service.engine.name,
                     "method": service.speculative.method.value,
                     "stop": [o.unit_name for o in overlapping(container_services, set(service.gpus)) if o is not service],
                     "client": client_command(bench, service, "run")})
    on_gpus = overlapping(container_services, gpus)
    restore = [{"name": s.name, "unit": s.unit_name, "enabled": s.enabled,
                "wait": client_command(bench, s, "wait") if s.enabled else None}
               for s in on_gpus]
    needs = ([service_key(s) for s in on_gpus] + [gate_key(s) for s in on_gpus if s.enabled]
             + list(reference_units))
    job = ddtree_job(bench, config, by_name)
    measure = [m.value for m in bench.measure]
    files = [bench_script(bench), prompts_file(bench), *ddtree_files(bench)]
    digest = inputs_digest(bench, runs, job, {s.name: service_units[s.name].digest for s in compared}, files)
    key = benchmark_key(bench)
    title = f"Benchmark {bench.name} on CT {bench.container} ({', '.join(bench.services)})"
    table = container_command([(python_of(compared[0]), True), (bench_script(bench).path, True),
                               ("table", False), (title, False), (json.dumps(measure), False)])
    restored = " ".join(f"{e['name']}={'running' if e['enabled'] else 'stopped'}" for e in restore)
    inner = render("benchmark/inner.sh.j2", unit=key, bench=bench, runs=runs, restore=restore, job=job, files=files,
                   restored=restored,
                   results=results_dir(bench), script=bench_script(bench).path, table=table,
                   stop_all=[s.unit_name for s in on_gpus])
    values = dict(unit=key, bench=bench, inner=inner, inputs=digest, results=results_dir(bench), force=force,
                  vmid=bench.container)
    host_facts = [Fact(f"results {results_dir(bench)}",
                       f'cat "$root"{results_dir(bench)}/inputs 2>/dev/null || echo missing', digest)]
    container_facts = files_facts(files)
    return Unit(
        key=key, kind="Benchmark",
        ensure=render("benchmark/benchmark.sh.j2", **values),
        teardown=render("benchmark/benchmark-teardown.sh.j2", unit=key, vmid=bench.container,
                        scripts=script_dir(bench), results=results_dir(bench)),
        probe=render_probe(key, host_facts, vmid=bench.container, container_facts=container_facts),
        desired=desired(host_facts + container_facts),
        needs=tuple(needs), files=tuple(files), container=bench.container,
        undoes=f"benchmark {bench.name}'s scripts removed from CT {bench.container}; its results in "
               f"{results_dir(bench)} on the host are kept",
    )


def summarize_benchmark(bench: BenchmarkConfig) -> dict[str, Any]:
    reference = bench.ddtree
    return {
        "services": list(bench.services),
        "measure": [m.value for m in bench.measure],
        "prompts": {"shortChat": bench.prompts.short_chat, "code": bench.prompts.code,
                    "toolCall": bench.prompts.tool_call,
                    "longContextTokens": bench.prompts.long_context.context_tokens,
                    "maxTokens": bench.prompts.max_tokens, "thinking": bench.thinking,
                    "file": f"{prompts_file(bench).path} (in CT {bench.container})"},
        "ddtree": None if reference is None else {
            "repository": reference.repository, "commit": reference.commit,
            "patch": f"{reference.patch.file} (sha256 {reference.patch.sha256})",
            "drafter": f"{reference.drafter.repo}@{reference.drafter.revision} in {reference.drafter.path}",
            "answers": ("the benchmark's prompts" if reference.dataset is None else
                        f"its data set {reference.dataset}"
                        + (f" ({reference.max_samples} samples)" if reference.max_samples else "")),
            "environment": (f"{reference.environment_of}'s" if reference.environment_of else
                            f"its own (locks/{ddtree_env(bench).requirements_lock.name})"),
        },
        "runId": bench.run_id,
        "results": f"{results_dir(bench)}/results.json, results.md (on the host)",
        "unit": benchmark_key(bench),
    }


def patch_text(bench: BenchmarkConfig) -> str:
    return (PROJECT_ROOT / bench.ddtree.patch.file).read_text()
