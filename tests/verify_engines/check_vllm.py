"""Inside a vLLM environment: the rendered command lines against vLLM's own `vllm serve` parser and engine args.

Reads a JSON list of invocations on stdin (`argv`, `environment`, `models`, `drafter`) and prints one line
`VERIFY {"ok", "reason", "flags", "environment", "engine_config"}`:

* the words after `vllm serve` (a service's argv, or what the trainer's hidden-state server hands to `vllm serve`
  after `--`) are parsed by the parser `vllm serve` itself builds (`ServeSubcommand.subparser_init`, i.e.
  vllm.entrypoints.openai.cli_args.make_arg_parser on a FlexibleArgumentParser) — strict: an unknown flag, a bad
  choice or a bad value fails — then the subcommand's own validation (`ServeSubcommand.validate`, i.e. validate_parsed_serve_args) and
  `AsyncEngineArgs.from_cli_args`;
* `create_engine_config()` is tried on local config-only model directories (the verifier: transformers' own
  `Qwen3_5Config` of the installed release, Qwen3.6-27B-like with 64 layers; a drafter: `Qwen3Config` with 5
  layers and a `dflash_config`). This machine has no GPU, so vLLM's platform is not CUDA there; the outcome is
  reported in "engine_config" and does not decide "ok";
* the device is stubbed (see stub_device): vLLM's CUDA platform with NVML's answers replaced;
* every VLLM_* variable the unit sets is in `vllm.envs.environment_variables` of this release.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import failure, flag_table, read_invocations, report, short_reason  # noqa: E402


def serve_words(invocation: dict) -> list[str]:
    """The words `vllm serve` parses: after `serve` in a service's argv, after `--` in a launcher's, the whole argv
    of an invocation whose program is `vllm serve` itself."""
    argv = invocation["argv"]
    if invocation.get("program", "").split()[-1:] == ["serve"]:
        return list(argv)
    if "serve" in argv:
        return argv[argv.index("serve") + 1:]
    if "--" in argv:
        return argv[argv.index("--") + 1:]
    raise ValueError(f"no `serve` and no `--` in {argv[:3]}…")


def stub_device() -> None:
    """This machine has no GPU, and vLLM builds even its parser's defaults from the platform (DeviceConfig). Stubbed,
    and nothing else: vLLM's CUDA platform class with NVML's answers replaced (2 × RTX A6000: compute capability
    8.6, 48 GiB), torch's CUDA device count, and — only if it cannot load here (it links libcuda.so.1, the
    driver's library) — the compiled-ops module vllm.platforms.cuda imports to register its kernels; no kernel runs."""
    import types

    import torch
    import vllm.platforms

    try:
        import vllm._C_stable_libtorch  # noqa: F401
    except ImportError:
        sys.modules["vllm._C_stable_libtorch"] = types.ModuleType("vllm._C_stable_libtorch")
    from vllm.platforms.cuda import NvmlCudaPlatform
    from vllm.platforms.interface import DeviceCapability

    class StubCudaPlatform(NvmlCudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return DeviceCapability(major=8, minor=6)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return "NVIDIA RTX A6000"

        @classmethod
        def get_device_uuid(cls, device_id: int = 0) -> str:
            return f"GPU-00000000-0000-0000-0000-00000000000{device_id}"

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return 48 * 1024 ** 3

        @classmethod
        def is_fully_connected(cls, physical_device_ids) -> bool:
            return True

        @classmethod
        def log_warnings(cls) -> None:
            pass

    vllm.platforms.current_platform = StubCudaPlatform()
    torch.cuda.device_count = lambda: 2


def model_dirs(root: Path) -> tuple[Path, Path]:
    from transformers import Qwen3_5Config, Qwen3Config

    verifier = Qwen3_5Config(text_config={"num_hidden_layers": 64, "hidden_size": 5120, "intermediate_size": 17408,
                                          "num_attention_heads": 24, "num_key_value_heads": 4,
                                          "linear_num_value_heads": 48, "max_position_embeddings": 262144})
    verifier.architectures = ["Qwen3_5ForConditionalGeneration"]
    verifier.save_pretrained(root / "verifier")
    drafter = Qwen3Config(num_hidden_layers=5, hidden_size=5120, intermediate_size=17408, num_attention_heads=32,
                          num_key_value_heads=8, head_dim=128, vocab_size=248320, max_position_embeddings=262144)
    drafter.architectures = ["DFlashDraftModel"]
    drafter.dflash_config = {"target_layer_ids": [1, 16, 31, 46, 61], "mask_token_id": 248070}
    drafter.block_size = 16
    drafter.save_pretrained(root / "drafter")
    return root / "verifier", root / "drafter"


def main() -> None:
    invocations = read_invocations()
    try:
        import vllm.entrypoints.cli.serve as serve_module
        import vllm.envs
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.cli.serve import ServeSubcommand
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except Exception as error:  # noqa: BLE001 - the reason is the result
        report(False, failure("import vllm", error))
        return

    try:
        stub_device()
    except Exception as error:  # noqa: BLE001
        report(False, failure("stubbing the device", error))
        return

    def serve_parser():
        parser = FlexibleArgumentParser(prog="vllm")
        return parser, ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))

    _, serve = serve_parser()
    flags = flag_table(serve)
    # The module moved between releases (vllm.entrypoints.openai.cli_args in 0.26, …common.cli_args in 0.33).
    source = (f"{serve_module.make_arg_parser.__module__}.make_arg_parser through "
              f"{ServeSubcommand.__module__}.ServeSubcommand.subparser_init; vllm.envs.environment_variables")
    known_env = sorted(vllm.envs.environment_variables)
    problems, engine_config = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        verifier, drafter = model_dirs(Path(tmp))
        for invocation in invocations:
            name = invocation["name"]
            try:
                words = serve_words(invocation)
                parser, _ = serve_parser()
                args = parser.parse_args(["serve", *words])
                ServeSubcommand().validate(args)
                if getattr(args, "model_tag", None) is not None:
                    args.model = args.model_tag
                engine_args = AsyncEngineArgs.from_cli_args(args)
            except SystemExit as error:
                problems.append(f"{name}: parse: vllm serve exited {error.code} (see its message above)")
                continue
            except Exception as error:  # noqa: BLE001
                problems.append(f"{name}: {failure('parse/from_cli_args', error)}")
                continue
            unknown_env = [k for k in invocation["environment"] if k.startswith("VLLM_") and k not in known_env]
            if unknown_env:
                problems.append(f"{name}: unknown environment {','.join(unknown_env)}")
            # create_engine_config on config-only copies of the models; reported, not decisive (no GPU here).
            paths = {p: str(verifier) for p in invocation.get("models", [])}
            if invocation.get("drafter"):
                paths[invocation["drafter"]] = str(drafter)
            engine_args.model = paths.get(engine_args.model, engine_args.model)
            if engine_args.tokenizer in paths:
                engine_args.tokenizer = None
            speculative = getattr(engine_args, "speculative_config", None)
            if isinstance(speculative, dict) and speculative.get("model") in paths:
                speculative["model"] = paths[speculative["model"]]
            saved = dict(os.environ)
            os.environ.update({k: v for k, v in invocation["environment"].items() if not k.startswith("CUDA_")})
            try:
                engine_args.create_engine_config()
                engine_config[name] = "built"
            except BaseException as error:  # noqa: BLE001 - only reported
                engine_config[name] = f"not built on this machine: {short_reason(error)}"
            finally:
                os.environ.clear()
                os.environ.update(saved)
    report(not problems, "; ".join(problems) or "parsed by `vllm serve`, validated, AsyncEngineArgs built", flags,
           known_env, engine_config=engine_config, source=source)


if __name__ == "__main__":
    main()
