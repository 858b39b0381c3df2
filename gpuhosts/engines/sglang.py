"""SGLang: served through gpuhosts' launcher (templates/inference_service/sglang-serve.py.j2), which reads the API
key from the environment instead of a command line."""

from __future__ import annotations

from gpuhosts.engines.base import EngineDriver, Flags, number
from gpuhosts.envspec import EnvSpec
from gpuhosts.services import ServiceConfig, SpecMethod

LAUNCHER = "/usr/local/lib/gpuhosts/sglang-serve.py"
MAMBA_EXTRA_BUFFER = "extra_buffer"
# sglang/srt/server_args.py: NEXTN is SGLang's name for a model's own MTP layers (mapped to EAGLE internally).
ALGORITHMS = {SpecMethod.MTP: "NEXTN", SpecMethod.EAGLE3: "EAGLE3"}


class SGLangDriver(EngineDriver):
    name = "sglang"
    package = "sglang"
    # The "all" extra carries SGLang's serving dependencies (the attention kernels among them).
    extras = "[all]"
    repository = "https://github.com/sgl-project/sglang"
    key_variable = "GPUHOSTS_API_KEY"
    launchers = ((LAUNCHER, "inference_service/sglang-serve.py.j2"),)
    methods = frozenset(ALGORITHMS)
    settings = frozenset({"mamba_scheduler_strategy"})
    # --admin-api-key (0.5.9 and later): srt/utils/auth.py `decide_request_auth` lets only the admin key reach the
    # ADMIN_OPTIONAL endpoints once it is set (srt/entrypoints/http_server.py: /flush_cache,
    # /update_weights_from_disk, /start_profile, /load_lora_adapter, /abort_request, …); without it the API key
    # every client holds opens them.
    admin_endpoint = "/flush_cache"

    def argv(self, service: ServiceConfig, install: EnvSpec) -> list[str]:
        flags = Flags(self.facts(service.engine))
        flags.add("--model-path", service.model.path).add("--served-model-name", service.model_name)
        flags.add("--host", service.bind).add("--port", service.port).add("--tp-size", service.tensor_parallel_size)
        if service.context_length:
            flags.add("--context-length", service.context_length)
        if service.mem_fraction:
            flags.add("--mem-fraction-static", number(service.mem_fraction))
        if service.reasoning_parser:
            flags.add("--reasoning-parser", service.reasoning_parser)
        if service.tool_call_parser:
            flags.add("--tool-call-parser", service.tool_call_parser)
        flags.add("--enable-metrics")
        self._speculative(service, flags)
        return [install.interpreter, LAUNCHER, *flags.words, *service.extra_args]

    def _speculative(self, service: ServiceConfig, flags: Flags) -> None:
        spec = service.speculative
        if spec.method is SpecMethod.NONE:
            return
        if spec.method not in ALGORITHMS:
            raise ValueError(f"service {service.name}: speculative method {spec.method.value} is not served by sglang")
        flags.add("--speculative-algorithm", ALGORITHMS[spec.method])
        if spec.drafter is not None:
            flags.add("--speculative-draft-model-path", spec.drafter.path)
        flags.add("--speculative-num-steps", spec.num_steps).add("--speculative-eagle-topk", spec.eagle_topk)
        flags.add("--speculative-num-draft-tokens", spec.num_draft_tokens)
        strategy = service.mamba_scheduler_strategy or (
            MAMBA_EXTRA_BUFFER if self.model_facts(service).gdn_hybrid else None)
        if strategy:
            flags.add("--mamba-scheduler-strategy", strategy)

    def switches(self, service: ServiceConfig) -> dict[str, str]:
        if service.speculative.method is not SpecMethod.NONE and self.model_facts(service).gdn_hybrid:
            return {"SGLANG_ENABLE_SPEC_V2": "1"}
        return {}

    def acceptance_metrics(self) -> dict[str, str]:
        # sglang/srt/metrics/collector.py: gauges averaged over the ranks.
        return {"kind": "gauges", "length": "sglang:spec_accept_length", "rate": "sglang:spec_accept_rate"}
