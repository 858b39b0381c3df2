"""vLLM: `vllm serve`, which reads the API key from VLLM_API_KEY in its EnvironmentFile."""

from __future__ import annotations

from gpuhosts.compat_data import engine_facts, model_facts
from gpuhosts.engines.base import EngineDriver, Flags, number
from gpuhosts.envspec import EnvSpec
from gpuhosts.services import PackageSpec, ServiceConfig, SpecMethod
from gpuhosts.training import ServerSpec

# DFlash's drafter needs non-causal attention within a block, which vLLM's flash-attn backend provides.
DFLASH_ATTENTION_BACKEND = "flash_attn"
SLIDING_WINDOW_BUILD_PR = 40898


class VllmDriver(EngineDriver):
    name = "vllm"
    package = "vllm"
    repository = "https://github.com/vllm-project/vllm"
    key_variable = "VLLM_API_KEY"
    methods = frozenset({SpecMethod.DFLASH, SpecMethod.EAGLE3, SpecMethod.MTP})

    def argv(self, service: ServiceConfig, install: EnvSpec) -> list[str]:
        flags = Flags(self.facts(service.engine))
        flags.words = ["serve", service.model.path]
        flags.add("--served-model-name", service.model_name).add("--host", service.bind).add("--port", service.port)
        flags.add("--tensor-parallel-size", service.tensor_parallel_size)
        if service.context_length:
            flags.add("--max-model-len", service.context_length)
        if service.mem_fraction:
            flags.add("--gpu-memory-utilization", number(service.mem_fraction))
        if service.reasoning_parser:
            flags.add("--reasoning-parser", service.reasoning_parser)
        if service.tool_call_parser:
            # vllm/entrypoints/openai/cli_args.py: a tool-call parser is used only with auto tool choice on.
            flags.add("--enable-auto-tool-choice").add("--tool-call-parser", service.tool_call_parser)
        self._speculative(service, flags)
        return [f"{install.venv}/bin/vllm", *flags.words, *service.extra_args]

    def hidden_state_server_args(self, release: PackageSpec, server: ServerSpec) -> list[str]:
        """`vllm serve`'s flags for the training node's hidden-state server, which speculators' launch_vllm.py
        starts (it adds the model and the extraction config itself): where it listens, how it splits the verifier
        over its GPUs and their memory, the longest sequence, then the server's extraArgs."""
        flags = Flags(engine_facts(self.package, release.version))
        flags.add("--host", "127.0.0.1").add("--port", server.port)
        flags.add("--tensor-parallel-size", server.tensor_parallel_size)
        if server.data_parallel_size > 1:
            flags.add("--data-parallel-size", server.data_parallel_size)
        flags.add("--gpu-memory-utilization", number(server.mem_fraction)).add("--max-model-len", server.max_model_len)
        return [*flags.words, *server.extra_args]

    def _speculative(self, service: ServiceConfig, flags: Flags) -> None:
        spec = service.speculative
        drafter = spec.drafter
        if spec.method is SpecMethod.NONE:
            return
        if spec.method is SpecMethod.DFLASH:
            config = {"method": "dflash", "model": drafter.path, "num_speculative_tokens": spec.num_speculative_tokens}
        elif spec.method is SpecMethod.EAGLE3:
            config = {"method": "eagle3", "model": drafter.path, "num_speculative_tokens": spec.num_steps}
        else:
            config = {"method": "mtp", "num_speculative_tokens": spec.num_steps}
        flags.add("--speculative-config", config)
        if spec.method is SpecMethod.DFLASH:
            flags.add("--attention-backend", DFLASH_ATTENTION_BACKEND)

    def switches(self, service: ServiceConfig) -> dict[str, str]:
        drafter = service.speculative.drafter
        if drafter is None or self.contains(service.engine, SLIDING_WINDOW_BUILD_PR):
            return {}
        from_repo = model_facts(drafter.repo).sliding_window
        sliding = drafter.sliding_window if drafter.sliding_window is not None else from_repo
        return {"VLLM_USE_V2_MODEL_RUNNER": "1"} if sliding else {}

    def acceptance_metrics(self) -> dict[str, str]:
        # vllm/v1/spec_decode/metrics.py: counters; the gate takes differences around its timed request.
        return {"kind": "counters", "drafts": "vllm:spec_decode_num_drafts_total",
                "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
                "accepted": "vllm:spec_decode_num_accepted_tokens_total"}
