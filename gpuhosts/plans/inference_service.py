"""InferenceService: one engine (SGLang or vLLM) as a systemd unit inside its GPU container.

Every flag is derived from the typed service settings (`gpuhosts.services`) and the model facts of
`gpuhosts/compat-rules.yaml`; `extraArgs` are appended after them. The API key never appears in the unit or on a
command line: the unit names a 0600 EnvironmentFile, from which vLLM reads `VLLM_API_KEY` and the SGLang launcher
takes the key (see templates/inference_service/sglang-serve.py.j2).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from gpuhosts.compat import ModelFacts, model_facts
from gpuhosts.config import StackConfig
from gpuhosts.facts import Fact, desired, files_facts, systemd_fact
from gpuhosts.render import HostFile, render, systemd_command, systemd_value
from gpuhosts.units import Unit
from gpuhosts.services import Engine, ServiceConfig, SpecMethod

SERVICE_ROOT = "/opt/gpuhosts"
ENV_DIR = "/etc/gpuhosts"
SGLANG_LAUNCHER = "/usr/local/lib/gpuhosts/sglang-serve.py"
SGLANG_KEY_VARIABLE = "GPUHOSTS_API_KEY"
VLLM_KEY_VARIABLE = "VLLM_API_KEY"
MAMBA_EXTRA_BUFFER = "extra_buffer"
DFLASH_ATTENTION_BACKEND = "flash_attn"


def venv_path(service: ServiceConfig) -> str:
    return f"{SERVICE_ROOT}/{service.name}/venv"


def environment_file(service: ServiceConfig) -> str | None:
    return f"{ENV_DIR}/{service.name}.env" if service.api_key_secret else None


def secret_variable(service: ServiceConfig) -> str:
    """The variable the EnvironmentFile sets to the API key."""
    return VLLM_KEY_VARIABLE if service.engine.name is Engine.VLLM else SGLANG_KEY_VARIABLE


def _num(value: float) -> str:
    return format(value, "g")


def _speculative_args(service: ServiceConfig, facts: ModelFacts) -> list[str]:
    spec = service.speculative
    drafter = spec.drafter
    if spec.method is SpecMethod.NONE:
        return []
    if service.engine.name is Engine.SGLANG:
        if spec.method is SpecMethod.DFLASH:
            raise ValueError(f"service {service.name}: dflash is served with engine vllm")
        args = ["--speculative-algorithm", "NEXTN" if spec.method is SpecMethod.MTP else "EAGLE3"]
        if drafter is not None:
            args += ["--speculative-draft-model-path", drafter.path]
        args += ["--speculative-num-steps", str(spec.num_steps), "--speculative-eagle-topk", str(spec.eagle_topk),
                 "--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
        strategy = service.mamba_scheduler_strategy or (MAMBA_EXTRA_BUFFER if facts.gdn_hybrid else None)
        if strategy:
            args += ["--mamba-scheduler-strategy", strategy]
        return args
    if spec.method is SpecMethod.DFLASH:
        config = {"method": "dflash", "model": drafter.path, "num_speculative_tokens": spec.num_speculative_tokens}
    elif spec.method is SpecMethod.EAGLE3:
        config = {"method": "eagle3", "model": drafter.path, "num_speculative_tokens": spec.num_steps}
    else:
        config = {"method": "mtp", "num_speculative_tokens": spec.num_steps}
    args = ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    if spec.method is SpecMethod.DFLASH:
        args += ["--attention-backend", DFLASH_ATTENTION_BACKEND]
    return args


def engine_args(service: ServiceConfig) -> list[str]:
    """The engine's full command line, executable first; derived, then extraArgs."""
    facts = model_facts(service.model.repo)
    if service.engine.name is Engine.SGLANG:
        argv = [f"{venv_path(service)}/bin/python", SGLANG_LAUNCHER,
                "--model-path", service.model.path, "--served-model-name", service.model_name,
                "--host", service.bind, "--port", str(service.port), "--tp-size", str(service.tensor_parallel_size)]
        if service.context_length:
            argv += ["--context-length", str(service.context_length)]
        if service.mem_fraction:
            argv += ["--mem-fraction-static", _num(service.mem_fraction)]
        if service.reasoning_parser:
            argv += ["--reasoning-parser", service.reasoning_parser]
        argv += ["--enable-metrics"]
    else:
        argv = [f"{venv_path(service)}/bin/vllm", "serve", service.model.path, "--served-model-name", service.model_name,
                "--host", service.bind, "--port", str(service.port),
                "--tensor-parallel-size", str(service.tensor_parallel_size)]
        if service.context_length:
            argv += ["--max-model-len", str(service.context_length)]
        if service.mem_fraction:
            argv += ["--gpu-memory-utilization", _num(service.mem_fraction)]
        if service.reasoning_parser:
            argv += ["--reasoning-parser", service.reasoning_parser]
    return argv + _speculative_args(service, facts) + list(service.extra_args)


def engine_environment(service: ServiceConfig, stack: StackConfig | None = None) -> dict[str, str]:
    """The engine's environment (no secret): GPU selection, derived switches, then the configured environment."""
    env: dict[str, str] = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "HF_HUB_OFFLINE": "1"}
    if stack is not None:
        # Inside the container the nvidia devices count in PCI bus order over the container's own GPUs.
        owned = [g.address for g in stack.container_gpus(service.container)]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(owned.index(a)) for a in service.gpus if a in owned)
    facts = model_facts(service.model.repo)
    spec = service.speculative
    if service.engine.name is Engine.SGLANG and spec.method is not SpecMethod.NONE and facts.gdn_hybrid:
        env["SGLANG_ENABLE_SPEC_V2"] = "1"
    if service.engine.name is Engine.VLLM and spec.drafter is not None and not service.engine.contains(40898):
        drafter_facts = model_facts(spec.drafter.repo)
        sliding = spec.drafter.sliding_window if spec.drafter.sliding_window is not None else drafter_facts.sliding_window
        if sliding:
            env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    env.update(service.environment)
    return dict(sorted(env.items()))


def systemd_word(arg: str, purpose: str = "a word of ExecStart=") -> str:
    """One word of a systemd command line: quoted where needed, `%` and `$` escaped (gpuhosts.render)."""
    return systemd_value(arg, purpose, "exec")


def exec_start(argv: list[str], purpose: str = "ExecStart=") -> str:
    """ExecStart's value, one flag (with its value) per continued line."""
    return systemd_command(argv, purpose)


@dataclass(frozen=True)
class ServiceFiles:
    unit: HostFile
    launcher: HostFile | None
    argv: tuple[str, ...]
    environment: dict[str, str]


def render_service(service: ServiceConfig, stack: StackConfig | None = None) -> ServiceFiles:
    argv = engine_args(service)
    environment = engine_environment(service, stack)
    build = f"{service.engine.version}" + (f" + {service.engine.git_ref}" if service.engine.git_ref else "")
    unit = render("inference_service/service.j2", service=service, engine_build=build,
                  workdir=f"{SERVICE_ROOT}/{service.name}",
                  environment=environment, environment_file=environment_file(service), argv=argv)
    launcher = None
    if service.engine.name is Engine.SGLANG:
        launcher = HostFile(SGLANG_LAUNCHER, render("inference_service/sglang-serve.py.j2",
                                                    key_variable=SGLANG_KEY_VARIABLE), "0755")
    return ServiceFiles(unit=HostFile(f"/etc/systemd/system/{service.unit_name}", unit), launcher=launcher,
                        argv=tuple(argv), environment=environment)


def service_key(service: ServiceConfig) -> str:
    return f"ct{service.container}-service-{service.name}"


def plan_inference_service(service: ServiceConfig, stack: StackConfig, needs: tuple[str, ...]) -> Unit:
    """Install the unit (and launcher, gate script, key file) in the container; start, restart or stop it."""
    from gpuhosts.plans.gate_probe import render_gate_script
    from gpuhosts.plans.python_env import in_container, probe_in

    files = render_service(service, stack)
    gate_script = render_gate_script()
    installed = [files.unit] + ([files.launcher] if files.launcher else []) + [gate_script]
    model_dirs = [service.model.path] + ([service.speculative.drafter.path] if service.speculative.drafter else [])
    unit = service_key(service)
    secret = service.api_key_secret
    values = dict(unit=unit, vmid=service.container, service=service, venv=venv_path(service), files=installed,
                  restart_on=[f.path for f in installed if f is not gate_script], model_dirs=model_dirs,
                  env_file=environment_file(service), key_variable=secret_variable(service),
                  own_files=[files.unit.path] + ([environment_file(service)] if secret else []),
                  shared_files=[SGLANG_LAUNCHER, gate_script.path],
                  own_dirs=[ENV_DIR, SGLANG_LAUNCHER.rsplit("/", 1)[0]])
    facts = [*files_facts(installed), systemd_fact(service.unit_name, enabled=service.enabled, active=service.enabled)]
    if secret:
        # The key file's content is a secret: only its presence and mode are facts.
        env_file = environment_file(service)
        facts.append(Fact(f"key file {env_file}", f'stat -c "present mode:%a" "$root"{shlex.quote(env_file)} || echo missing',
                          "present mode:600"))
    return Unit(
        key=unit,
        kind="InferenceService",
        ensure=in_container(unit, service.container, render("container_services/service.sh.j2", **values), secret=secret),
        teardown=in_container(unit, service.container, render("container_services/service-teardown.sh.j2", **values),
                              teardown=True),
        probe=probe_in(unit, service.container, facts),
        desired=desired(facts),
        needs=needs,
        files=tuple(installed),
        stdin_secret=secret,
        container=service.container,
    )
