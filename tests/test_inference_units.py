"""InferenceService: the rendered units and command lines of the kpro5 services against reviewed golden copies
(tests/golden/services), `systemd-analyze verify` on each unit, and no secret in a unit or on a command line.

After an intended change: `GPUHOSTS_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_inference_units.py`,
then review the diff of tests/golden/services like any other code.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from gpuhosts.plans.inference_service import engine_args, exec_start, render_service, secret_variable, systemd_word
from services_data import kpro5_services, kpro5_stack
from systemd_scratch import place, verify

GOLDEN = Path(__file__).resolve().parent / "golden" / "services"
SECRET = "sk-gpuhosts-test-4f1c9e"


def rendered() -> dict[str, str]:
    """Every golden file: per service its unit, its launcher (SGLang) and its argv, one word a line."""
    files = {}
    stack = kpro5_stack()
    for service in kpro5_services():
        out = render_service(service, stack)
        files[f"{service.name}/{Path(out.unit.path).name}"] = out.unit.content
        files[f"{service.name}/argv.txt"] = "\n".join(out.argv) + "\n"
        files[f"{service.name}/environment.json"] = json.dumps(out.environment, indent=2) + "\n"
        for shipped in out.shipped:
            files[f"{service.name}/{Path(shipped.path).name}"] = shipped.content
    return files


def test_golden_files():
    files = rendered()
    if os.environ.get("GPUHOSTS_UPDATE_GOLDEN"):
        for name, content in files.items():
            (GOLDEN / name).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / name).write_text(content)
    on_disk = sorted(str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*") if p.is_file())
    assert sorted(files) == on_disk, "files added or removed: update the golden files and review"
    for name, content in files.items():
        assert (GOLDEN / name).read_text() == content, f"{name} differs: update the golden files and review"


def test_sglang_mtp_flags_are_derived():
    sglang, _ = kpro5_services()
    argv = " ".join(engine_args(sglang))
    assert ("--tp-size 2 --context-length 131072 --mem-fraction-static 0.8 --reasoning-parser qwen3 "
            "--tool-call-parser qwen3_coder --enable-metrics "
            "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4 --mamba-scheduler-strategy extra_buffer") in argv
    assert "--host 0.0.0.0 --port 30000" in argv


def test_vllm_dflash_speculative_config_is_json():
    _, vllm = kpro5_services()
    argv = engine_args(vllm)
    assert argv[:3] == ["/opt/gpuhosts/qwen-vllm-dflash/venv/bin/vllm", "serve", "/srv/models/Qwen3.6-27B"]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "dflash", "model": "/srv/models/Qwen3.6-27B-DFlash", "num_speculative_tokens": 15}
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[-2:] == ["--max-num-batched-tokens", "32768"], "extraArgs come last"


def test_exec_start_reads_back_as_the_argv():
    for service in kpro5_services():
        out = render_service(service, kpro5_stack())
        line = next(l for l in out.unit.content.replace("\\\n", " ").splitlines() if l.startswith("ExecStart="))
        assert shlex.split(line.removeprefix("ExecStart=")) == list(out.argv)


@pytest.mark.parametrize("arg,word", [("plain-1.0", "plain-1.0"), ("50%", "'50%%'"), ("$HOME", "'$$HOME'"),
                                      ('{"a":1}', "'{\"a\":1}'"), ("it's", '"it\'s"')])
def test_systemd_quoting(arg, word):
    assert systemd_word(arg) == word


def test_one_flag_per_line():
    assert exec_start(["/bin/x", "serve", "/m", "--a", "1", "--b", "--c", "d"]) == \
        "/bin/x serve /m \\\n    --a 1 \\\n    --b \\\n    --c d"


@pytest.mark.parametrize("service", kpro5_services(), ids=lambda s: s.name)
def test_unit_verifies_clean(service, scratch_root):  # noqa: F811
    unit = render_service(service, kpro5_stack()).unit
    result = verify(scratch_root, place(scratch_root, unit.path, unit.content))
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_api_key_reaches_the_engine_only_through_the_environment_file():
    for service in kpro5_services():
        out = render_service(service, kpro5_stack())
        assert f"EnvironmentFile=/etc/gpuhosts/{service.name}.env" in out.unit.content
        assert "--api-key" not in out.argv and "api-key" not in out.unit.content
        assert secret_variable(service) not in out.environment
    sglang, vllm = kpro5_services()
    assert secret_variable(vllm) == "VLLM_API_KEY" and secret_variable(sglang) == "GPUHOSTS_API_KEY"


def test_no_secret_in_any_rendered_file():
    """Secrets arrive as stack values; even set in every secret key they appear in no unit, argv or launcher."""
    from gpuhosts.plan import SECRET_PLACEHOLDER
    for name, content in rendered().items():
        assert SECRET_PLACEHOLDER not in content and "hf_" not in content and SECRET not in content, name


def test_without_api_key_there_is_no_key_file_but_the_admin_key():
    """The API key's file only with an API key; SGLang's admin endpoints have their own key even on loopback, where
    any local user reaches them."""
    (service,) = kpro5_services(lambda raw: (raw.pop(1), raw[0].pop("apiKeySecret"), raw[0].update(bind="127.0.0.1")))
    lines = [line for line in render_service(service, kpro5_stack()).unit.content.splitlines()
             if line.startswith("EnvironmentFile=")]
    assert lines == ["EnvironmentFile=/etc/gpuhosts/qwen-sglang.admin.env"]


ADMIN_SECRET = "admin-4b1d7c0e9f2a61d3"


def launcher_beside_a_stand_in(tmp_path: Path, launch_server: str) -> Path:
    """kpro5's SGLang launcher as shipped, written to tmp_path, with a stand-in `sglang.launch_server` of the given
    source beside it (tmp_path goes on PYTHONPATH)."""
    sglang, _ = kpro5_services()
    (launcher,) = render_service(sglang, kpro5_stack()).shipped
    script = tmp_path / "sglang-serve.py"
    script.write_text(launcher.content)
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(launch_server)
    return script


@pytest.mark.parametrize("keys, passed", [
    ({"GPUHOSTS_API_KEY": SECRET}, [f"--api-key={SECRET}"]),
    ({"GPUHOSTS_API_KEY": SECRET, "GPUHOSTS_ADMIN_API_KEY": ADMIN_SECRET},
     [f"--api-key={SECRET}", f"--admin-api-key={ADMIN_SECRET}"]),
], ids=["api key", "api and admin keys"])
def test_sglang_launcher_hides_the_keys(tmp_path, keys, passed):
    """Run the launcher against a stand-in sglang.launch_server: each key is passed on, absent from the OS argv and
    from the environment, and redacted in log records."""
    import subprocess
    import sys

    values = list(keys.values())
    script = launcher_beside_a_stand_in(
        tmp_path,
        "import logging, os, sys\n"
        "logging.basicConfig(level=logging.INFO, format='%(message)s')\n"
        "logging.getLogger('x').info('server_args=%s', sys.argv)\n"
        f"print('keys' if sys.argv[3:] == {passed!r} else 'no keys')\n"
        f"print('env' if any(k in v for k in {values!r} for v in os.environ.values()) else 'no env')\n"
        f"print('cmdline' if any(k.encode() in open('/proc/self/cmdline', 'rb').read() for k in {values!r}) "
        "else 'no cmdline')\n")
    result = subprocess.run([sys.executable, str(script), "--port", "30000"], capture_output=True, text=True,
                            env={**keys, "PYTHONPATH": str(tmp_path), "PATH": os.environ["PATH"]})
    assert result.stdout.split() == ["keys", "no", "env", "no", "cmdline"], result.stdout + result.stderr
    assert not any(value in result.stderr for value in values)
    assert result.stderr.count("[secret]") == len(values)


@pytest.mark.parametrize("key, admin_key", [("sk-plain", "Yp3q_x"), ("-starts-with-a-dash", "-Kp9w_Zx"),
                                            ("--api-key", "--port")])
def test_the_sglang_launcher_hands_any_key_to_sglangs_parser_as_its_value(tmp_path, key, admin_key):
    """The launcher run with argparse as SGLang's server_args.py declares the two flags (type str, one value each):
    a key that begins with "-", as a URL-safe base64 admin key may, is still the flag's value."""
    import subprocess
    import sys

    script = launcher_beside_a_stand_in(
        tmp_path,
        "import argparse, json, sys\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--model-path')\n"
        "parser.add_argument('--api-key', type=str)\n"
        "parser.add_argument('--admin-api-key', type=str)\n"
        "print(json.dumps(vars(parser.parse_args(sys.argv[1:]))))\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "GPUHOSTS_API_KEY": key,
           "GPUHOSTS_ADMIN_API_KEY": admin_key}
    result = subprocess.run([sys.executable, str(script), "--model-path", "/srv/models/m"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"model_path": "/srv/models/m", "api_key": key, "admin_api_key": admin_key}
