"""Inside an SGLang environment: the rendered command lines against SGLang's own parser and ServerArgs.

Reads a JSON list of invocations on stdin (`program`, `argv`, `environment`, `launcher`, `models`) and prints one
line `VERIFY {"ok", "reason", "flags", "environment"}`:

* the launcher gpuhosts installs (templates/inference_service/sglang-serve.py.j2, rendered) runs as systemd
  starts it, with a key in its variable, up to its hand-over to SGLang, which is recorded instead of run; the module
  it hands over to is imported (not run) from this environment;
* the command line SGLang then gets (argv[2:] and the launcher's `--api-key`) is parsed strictly by an argparse parser that `ServerArgs.add_cli_args` built (an unknown flag, a bad
  choice or a missing value fails), then `ServerArgs.from_cli_args` runs SGLang's own defaults and checks
  (`__post_init__`) on a local model directory whose config.json is the verifier's shape, built with the installed
  transformers' `Qwen3_5Config` (a Qwen3.6-27B-like config: 64 layers, Gated DeltaNet every layer but each
  fourth; widths illustrative);
* every environment variable the unit sets that SGLang reads (SGLANG_*/SGL_*) is an `Envs` field of this release.

This machine has no GPU. Stubbed, and nothing else: what ServerArgs asks about the device — `get_device` ("cuda"),
`get_device_memory_capacity` (48 GiB, an RTX A6000), `get_device_sm` (86), `get_device_name`, `is_cuda` — in
sglang.srt.server_args' namespace, and torch.cuda's capability and count, so that the CUDA defaults are the ones
checked.
"""

from __future__ import annotations

import argparse
import importlib
import os
import runpy
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import failure, flag_table, read_invocations, report, strict  # noqa: E402

GPU_MEMORY_MB = 48 * 1024
GPU_SM = 86


def stub_device(server_args) -> None:
    import torch

    server_args.get_device = lambda *a, **k: "cuda"
    server_args.get_device_memory_capacity = lambda *a, **k: GPU_MEMORY_MB
    server_args.get_device_sm = lambda *a, **k: GPU_SM
    server_args.get_device_name = lambda *a, **k: "NVIDIA RTX A6000"
    server_args.is_cuda = lambda: True
    torch.cuda.get_device_capability = lambda *a, **k: (8, 6)
    torch.cuda.device_count = lambda: 2


def verifier_dir(root: Path, layers: int) -> Path:
    """A Qwen3.6-27B-like config.json (no weights): transformers' own Qwen3_5Config of the installed release."""
    from transformers import Qwen3_5Config

    config = Qwen3_5Config(text_config={"num_hidden_layers": layers, "hidden_size": 5120, "intermediate_size": 17408,
                                        "num_attention_heads": 24, "num_key_value_heads": 4,
                                        "linear_num_value_heads": 48, "max_position_embeddings": 262144,
                                        "mtp_num_hidden_layers": 1})
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    target = root / "verifier"
    config.save_pretrained(target)
    return target


def env_names() -> list[str]:
    from sglang.srt import environ

    names = [name for name, value in vars(environ.Envs).items() if isinstance(value, environ.EnvField)]
    return sorted(names)


def environ_module() -> str:
    from sglang.srt import environ

    return environ.__name__


def main() -> None:
    invocations = read_invocations()
    try:
        from sglang.srt import server_args
        from sglang.srt.server_args import ServerArgs
    except Exception as error:  # noqa: BLE001 - the reason is the result
        report(False, failure("import sglang.srt.server_args", error))
        return
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags = flag_table(parser)
    known_env = env_names()
    stub_device(server_args)
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        model = verifier_dir(Path(tmp), 64)
        for invocation in invocations:
            name = invocation["name"]
            # The launcher as systemd starts it, with a key in its variable; its hand-over to SGLang is recorded
            # instead of run, and the module it names is imported (not run) from this environment.
            launcher = Path(tmp) / "sglang-serve.py"
            launcher.write_text(invocation["launcher"])
            handed = {}
            saved_argv, saved_run = sys.argv, runpy.run_module
            os.environ[invocation["key_variable"]] = "verify-key"
            try:
                sys.argv = [str(launcher), *invocation["argv"][2:]]
                runpy.run_module = lambda module, **kw: handed.update(module=module, argv=list(sys.argv))
                runpy.run_path(str(launcher), run_name="__main__")
                importlib.import_module(handed["module"])
            except Exception as error:  # noqa: BLE001
                problems.append(f"{name}: {failure('launcher', error)}")
                continue
            finally:
                sys.argv, runpy.run_module = saved_argv, saved_run
                os.environ.pop(invocation["key_variable"], None)
            words = handed["argv"][1:]
            # The verifier's weights are not here: its path names the local config-only directory instead.
            words = [str(model) if w in invocation.get("models", []) else w for w in words]
            try:
                args = strict(argparse.ArgumentParser())
                ServerArgs.add_cli_args(args)
                parsed = args.parse_args(words)
            except Exception as error:  # noqa: BLE001
                problems.append(f"{name}: {failure('parse', error)}")
                continue
            unknown_env = [k for k in invocation["environment"]
                           if k.startswith(("SGLANG_", "SGL_")) and k not in known_env]
            if unknown_env:
                problems.append(f"{name}: unknown environment {','.join(unknown_env)}")
            saved = dict(os.environ)
            os.environ.update(invocation["environment"])
            try:
                ServerArgs.from_cli_args(parsed)
            except Exception as error:  # noqa: BLE001
                problems.append(f"{name}: {failure('ServerArgs.from_cli_args', error)}")
            finally:
                os.environ.clear()
                os.environ.update(saved)
    report(not problems, "; ".join(problems) or "parsed, ServerArgs built, launcher imported", flags, known_env,
           source=f"{ServerArgs.__module__}.ServerArgs.add_cli_args; {environ_module()}.Envs")


if __name__ == "__main__":
    main()
