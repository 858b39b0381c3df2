"""The simulated host's container 129 as the inference-service scripts meet it: python3 and venvs, uv, hf,
bind mounts and systemd units inside the container (see tests/fakehost/README.md)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakehost import host_env  # noqa: E402
from fakehost.tree import seed_kpro5, tree_digest, tree_listing  # noqa: E402
from fakehost.pytools import packages as installed_packages  # noqa: E402
from fakehost.util import configure  # noqa: E402

CT = "var/lib/lxc/129/rootfs"
UV = "0.8.17"
TOKEN = "hf_s3cr3tT0kenValue"
QWEN, DFLASH = "Qwen/Qwen3.6-27B", "z-lab/Qwen3.6-27B-DFlash"
QWEN_FILES = ["config.json", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
              "model-00003-of-00003.safetensors", "model.safetensors.index.json", "tokenizer.json"]

# Inside the container every path is spelled "${GPUHOSTS_HOST_ROOT:-}/path", as the scripts do.
PRELUDE = """set -eu
R=${GPUHOSTS_HOST_ROOT:-}
boot=$R/opt/gpuhosts/uv; uv=$boot/bin/uv; venv=$R/opt/gpuhosts/llm/venv; py=$venv/bin/python; hf=$venv/bin/hf
"""
BOOTSTRAP = f'"$R/usr/bin/python3" -m venv "$boot" && "$boot/bin/python" -m pip install --quiet uv=={UV}\n'


def ct(tree, script, check=True, **env):
    # what the tests' own environment might hold must not reach hf or uv in the container
    base = {k: v for k, v in host_env(tree).items() if k not in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "VIRTUAL_ENV")}
    p = subprocess.run(["pct", "exec", "129", "--", "bash", "-c", PRELUDE + script], env=host_env(tree, base, **env),
                       capture_output=True, text=True, timeout=120)
    if check and p.returncode:
        raise AssertionError(f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def sh(tree, script, check=True):
    p = subprocess.run(["bash", "-c", "set -eu\nr=$GPUHOSTS_HOST_ROOT\n" + script], env=host_env(tree),
                       capture_output=True, text=True, timeout=120)
    if check and p.returncode:
        raise AssertionError(f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


@pytest.fixture
def host(tmp_path):
    return seed_kpro5(tmp_path / "kpro5")


@pytest.fixture
def engine_host(host):
    """uv bootstrapped and an empty engine venv."""
    ct(host, BOOTSTRAP + '"$uv" venv --quiet --python 3.12 "$venv"')
    return host


def packages(tree):
    return installed_packages(tree / CT / "opt/gpuhosts/llm/venv")


# ---- python3, venvs and uv ------------------------------------------------------------------------------

@pytest.mark.parametrize("script, rc, out, err", [
    ("\"$R/usr/bin/python3\" -c 'import ensurepip'", 0, "", ""),
    ("\"$R/usr/bin/python3\" -c 'import sys; print(sys.argv[1:])' a b", 0, "['a', 'b']\n", ""),
    (BOOTSTRAP + '"$uv" --version', 0, f"uv {UV}\n", ""),
    (BOOTSTRAP + f'"$boot/bin/python" -m pip install uv=={UV}', 0,
     f"Requirement already satisfied: uv=={UV} in ./lib/python3.11/site-packages ({UV})\n", ""),
    (BOOTSTRAP + '"$uv" venv --python 3.12 "$venv"', 0, "", "Creating virtual environment at: "),
    (BOOTSTRAP + '"$uv" venv -q "$venv"; "$uv" venv "$venv"', 2, "",
     "error: A virtual environment already exists at "),
    (BOOTSTRAP + '"$uv" venv -q "$venv"; "$uv" venv -q --allow-existing "$venv"; "$uv" venv -q --clear "$venv"',
     0, "", ""),
    (BOOTSTRAP + '"$uv" venv -q "$venv"; "$py" -m pip install x==1', 1, "", "bin/python: No module named pip"),
    (BOOTSTRAP + '"$uv" venv -q --seed "$venv"; "$py" -m pip --version | cut -d" " -f1-2', 0, "pip 25.2\n", ""),
    (BOOTSTRAP + '"$uv" venv -q "$venv"; echo \'{"ok": true}\' | "$py" -c "import json, sys; print(json.load(sys.stdin))"',
     0, "{'ok': True}\n", ""),
    (BOOTSTRAP + '"$uv" pip install sglang==0.5.11', 2, "", "error: No virtual environment found"),
])
def test_python_venv_and_uv(host, script, rc, out, err):
    p = ct(host, script, check=False)
    assert (p.returncode, p.stdout) == (rc, out), p.stderr
    assert err in p.stderr


def test_python3_venv_layout(host):
    ct(host, BOOTSTRAP)
    boot = host / CT / "opt/gpuhosts/uv"
    assert (boot / "pyvenv.cfg").read_text().endswith("command = /usr/bin/python3 -m venv /opt/gpuhosts/uv\n")
    assert (boot / "bin/python3").is_symlink() and (boot / "bin/uv").is_file()
    assert installed_packages(boot)["uv"] == {"version": UV}
    # What pip records of it ("Recording installed projects"): a .dist-info in the venv's site-packages.
    record = boot / f"lib/python3.11/site-packages/uv-{UV}.dist-info"
    assert (record / "METADATA").read_text() == f"Metadata-Version: 2.1\nName: uv\nVersion: {UV}\n"
    assert (record / "INSTALLER").read_text() == "pip\n"
    assert (record / "RECORD").read_text().splitlines()[-1] == f"uv-{UV}.dist-info/RECORD,,"


@pytest.mark.parametrize("spec, name, version, programs", [
    ("sglang==0.5.11", "sglang", "0.5.11", {"hf"}),
    ("sglang[all]==0.5.11", "sglang", "0.5.11", {"hf"}),
    ("vllm==0.26.0", "vllm", "0.26.0", {"hf", "vllm"}),
    ("vllm @ git+https://github.com/vllm-project/vllm@6f1e2b3c4d5a69788796a5b4c3d2e1f0a9b8c7d6", "vllm",
     "0.0.0+g6f1e2b3c4d5a", {"hf", "vllm"}),
    ("prometheus_client==0.23.1", "prometheus-client", "0.23.1", set()),
])
def test_uv_pip_install_show_and_reinstall(engine_host, spec, name, version, programs):
    install = f'"$uv" pip install --quiet --python "$py" "{spec}"\n'
    ct(engine_host, install)
    p = ct(engine_host, f'"$uv" pip show --python "$py" {name}')
    assert p.stdout.startswith(f"Name: {name}\nVersion: {version}\n")
    assert {p.name for p in (engine_host / CT / "opt/gpuhosts/llm/venv/bin").iterdir()} == {"python", "python3", *programs}
    if "url" in spec:
        assert packages(engine_host)["vllm"]["url"] == spec.split(" @ ")[1]
    if programs:
        assert ct(engine_host, '"$uv" pip show --python "$py" huggingface_hub').stdout.startswith(
            "Name: huggingface-hub\nVersion: 0.36.0\n")
    if "vllm" in programs:
        assert ct(engine_host, '"$venv/bin/vllm" --version').stdout == version + "\n"
    metadata = next((engine_host / CT / "opt/gpuhosts/llm/venv/lib/python3.12/site-packages").glob(
        f"{name.replace('-', '_')}-*.dist-info/METADATA"))
    before, mtime = tree_digest(engine_host), metadata.stat().st_mtime_ns
    p = ct(engine_host, install.replace("--quiet ", ""))
    assert "Audited 1 package" in p.stderr
    assert tree_digest(engine_host) == before
    assert metadata.stat().st_mtime_ns == mtime


def test_uv_pip_show_missing(engine_host):
    p = ct(engine_host, '"$uv" pip show --python "$py" sglang', check=False)
    assert (p.returncode, p.stdout, p.stderr) == (1, "", "warning: Package(s) not found for: sglang\n")


@pytest.mark.parametrize("knob", [True, ["sglang"]])
def test_install_failure_records_nothing(engine_host, knob):
    before = tree_digest(engine_host)
    configure(engine_host, uv_fail_install=knob)
    p = ct(engine_host, '"$uv" pip install --python "$py" sglang==0.5.11', check=False)
    assert p.returncode == 2 and p.stderr.startswith("error: Failed to fetch: `https://pypi.org/simple/sglang/`")
    configure(engine_host, uv_fail_install=None)
    assert tree_digest(engine_host) == before
    ct(engine_host, '"$uv" pip install -q --python "$py" sglang==0.5.11')
    assert packages(engine_host)["sglang"] == {"version": "0.5.11"}


def test_pip_failure_knob(host):
    configure(host, pip_fail_install=True)
    p = ct(host, BOOTSTRAP, check=False)
    assert p.returncode == 1 and f"No matching distribution found for uv=={UV}" in p.stderr
    assert not (host / CT / "opt/gpuhosts/uv/bin/uv").exists()


# ---- hf -------------------------------------------------------------------------------------------------

def hf_host(host):
    ct(host, BOOTSTRAP + '"$uv" venv -q "$venv" && "$uv" pip install -q --python "$py" sglang==0.5.11')
    return host


@pytest.mark.parametrize("repo, env, rc, says, files", [
    (QWEN, {}, 0, "", QWEN_FILES),
    (QWEN, {"HF_TOKEN": TOKEN}, 0, "", QWEN_FILES),
    (DFLASH, {}, 1, f"401 Client Error. (Request ID: Root=1-6a0c0000-fakehost)\n\nCannot access gated repo for url "
                    f"https://huggingface.co/{DFLASH}/", []),
    (DFLASH, {"HF_TOKEN": TOKEN}, 0, "", ["config.json", "model.safetensors"]),
    (DFLASH, {"HF_TOKEN_PATH": "/root/hf-token"}, 0, "", ["config.json", "model.safetensors"]),
    (DFLASH, {"HF_TOKEN": "not-a-token"}, 1, "Invalid credentials", []),
    (QWEN, {"HF_TOKEN": "not-a-token"}, 1, "Invalid credentials", []),
    ("Qwen/Qwen9-1B", {}, 1, "Repository Not Found for url: https://huggingface.co/api/models/Qwen/Qwen9-1B/revision/main",
     []),
])
def test_hf_download(tmp_path, repo, env, rc, says, files):
    host = hf_host(seed_kpro5(tmp_path / "kpro5"))
    (host / CT / "root/hf-token").write_text(TOKEN + "\n")
    p = ct(host, f'"$hf" download {repo} --local-dir "$R/srv/models/m" --quiet', check=False, **env)
    assert p.returncode == rc, p.stderr
    assert says in p.stderr
    model = host / CT / "srv/models/m"
    assert sorted(f.name for f in model.iterdir() if f.name != ".cache") == files if files else not model.exists()
    if rc == 0:
        assert p.stdout == f"{host / CT}/srv/models/m\n"
        assert (model / ".cache/huggingface/download/config.json.metadata").is_file()
    sent = "yes" if env else "no"
    assert (host / "var/log/fakehost/hf.log").read_text() == (
        f"download {repo}@main -> /srv/models/m fetched={len(files)} reused=0 token={sent} rc={rc}\n")
    assert TOKEN not in p.stdout + p.stderr


def test_hf_config_facts(tmp_path):
    host = hf_host(seed_kpro5(tmp_path / "kpro5"))
    ct(host, f'"$hf" download {QWEN} --local-dir "$R/srv/models/q" --quiet && '
             f'"$hf" download {DFLASH} --local-dir "$R/srv/models/d" --quiet', HF_TOKEN=TOKEN)
    q = json.loads((host / CT / "srv/models/q/config.json").read_text())
    d = json.loads((host / CT / "srv/models/d/config.json").read_text())
    assert q["num_hidden_layers"] == 64 and q["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert set(q["layer_types"]) == {"linear_attention", "full_attention"} and len(q["layer_types"]) == 64
    assert d["dflash_config"] == {"target_layer_ids": [1, 16, 31, 46, 61], "block_size": 16, "mask_token_id": 248070}
    assert d["layer_types"][-1] == "full_attention" and d["sliding_window"] == 2048
    index = json.loads((host / CT / "srv/models/q/model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == QWEN_FILES[1:4]


def test_hf_resumes_after_a_dropped_connection(tmp_path):
    host = hf_host(seed_kpro5(tmp_path / "kpro5"))
    model, cache = host / CT / "srv/models/q", host / CT / "srv/models/q/.cache/huggingface/download"
    configure(host, hf_fail_after_files=3)
    p = ct(host, f'"$hf" download {QWEN} --local-dir "$R/srv/models/q" --quiet', check=False, HF_TOKEN=TOKEN)
    assert p.returncode == 1 and "Connection reset by peer" in p.stderr
    assert sorted(f.name for f in model.iterdir() if f.is_file()) == QWEN_FILES[:2]
    assert [f.name for f in cache.glob("*.incomplete")] == [QWEN_FILES[2] + ".incomplete"]
    configure(host, hf_fail_after_files=None)
    ct(host, f'"$hf" download {QWEN} --local-dir "$R/srv/models/q" --quiet', HF_TOKEN=TOKEN)
    ct(host, f'"$hf" download {QWEN} --local-dir "$R/srv/models/fresh" --quiet')
    ct(host, f'"$hf" download {QWEN} --local-dir "$R/srv/models/q" --quiet')
    assert tree_listing(model) == tree_listing(host / CT / "srv/models/fresh")
    log = (host / "var/log/fakehost/hf.log").read_text()
    assert log.splitlines() == [
        f"download {QWEN}@main -> /srv/models/q fetched=2 reused=0 token=yes rc=1",
        f"download {QWEN}@main -> /srv/models/q fetched=4 reused=2 token=yes rc=0",
        f"download {QWEN}@main -> /srv/models/fresh fetched=6 reused=0 token=no rc=0",
        f"download {QWEN}@main -> /srv/models/q fetched=0 reused=6 token=no rc=0"]
    assert TOKEN not in log


def test_hf_repos_setting(tmp_path):
    host = hf_host(seed_kpro5(tmp_path / "kpro5"))
    configure(host, hf_repos={"acme/tiny": {"gated": False, "revisions": ["v1"],
                                            "files": {"config.json": "{}\n", "model.safetensors": 100}},
                              QWEN: None})
    p = ct(host, '"$hf" download acme/tiny --revision v1 --local-dir "$R/srv/models/t" --quiet')
    assert (host / CT / "srv/models/t/model.safetensors").stat().st_size == 100
    p = ct(host, '"$hf" download acme/tiny --revision v2 --local-dir "$R/srv/models/t"', check=False)
    assert p.returncode == 1 and "Revision Not Found" in p.stderr
    p = ct(host, f'"$hf" download {QWEN} --local-dir "$R/srv/models/q"', check=False)
    assert p.returncode == 1 and "Repository Not Found" in p.stderr


# ---- bind mounts ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("opt, says", [
    ("--mp0 /tank/nothing,mp=/srv/models", "mp0: mount point source '/tank/nothing' does not exist"),
    ("--mp0 /tank/models", "mp0.mp: property is missing"),
    ("--mp0 /tank/models,mp=srv/models", "invalid path"),
])
def test_pct_set_refuses_bad_mount_points(host, opt, says):
    (host / "tank/models").mkdir(parents=True)
    conf = (host / "etc/pve/lxc/129.conf").read_bytes()
    p = sh(host, f"pct set 129 {opt}", check=False)
    assert p.returncode == 255 and says in p.stderr
    assert (host / "etc/pve/lxc/129.conf").read_bytes() == conf


@pytest.mark.parametrize("running", [True, False])
def test_bind_mount_both_ways_and_across_restarts(host, running):
    (host / "tank/models").mkdir(parents=True)
    (host / "tank/models/from-host").write_text("host\n")
    if not running:
        sh(host, "pct stop 129")
    start = tree_digest(host)
    sh(host, "pct set 129 --mp0 /tank/models,mp=/srv/models,backup=0" + ("" if running else "; pct start 129"))
    assert "mp0: /tank/models,mp=/srv/models,backup=0\n" in sh(host, "pct config 129").stdout
    assert ct(host, 'cat "$R/srv/models/from-host"; echo ct > "$R/srv/models/from-ct"; '
                    'cat "$R/srv/models.fakehost-shadowed/README" >/dev/null').stdout == "host\n"
    assert (host / "tank/models/from-ct").read_text() == "ct\n"
    mounted = tree_digest(host)
    sh(host, "pct stop 129")
    assert not (host / CT / "srv/models").is_symlink() and (host / CT / "srv/models/README").is_file()
    sh(host, "pct start 129")
    assert tree_digest(host) == mounted
    sh(host, "reboot")
    assert tree_digest(host) == mounted
    # On the running container the deletion waits for the next start; the mount stays until then.
    sh(host, "pct set 129 --delete mp0; rm $r/tank/models/from-ct")
    assert (host / CT / "srv/models").is_symlink() and "del mp0: " in sh(host, "pct pending 129").stdout
    sh(host, "pct reboot 129" + ("" if running else "; pct stop 129"))
    assert tree_digest(host) == start


def test_copied_tree_mounts_its_own_host_path(host, tmp_path):
    import shutil
    (host / "tank/models").mkdir(parents=True)
    sh(host, "pct set 129 --mp0 /tank/models,mp=/srv/models")
    copy = tmp_path / "copy"
    shutil.copytree(host, copy, symlinks=True)
    ct(copy, 'echo x > "$R/srv/models/f"')
    assert (copy / "tank/models/f").exists() and not (host / "tank/models/f").exists()


def test_container_start_needs_the_mount_source(host):
    (host / "tank/models").mkdir(parents=True)
    sh(host, "pct set 129 --mp0 /tank/models,mp=/srv/models && pct stop 129 && rmdir $r/tank/models")
    p = sh(host, "pct start 129", check=False)
    assert p.returncode == 255 and "Failed to mount \"/tank/models\"" in p.stderr
    assert (host / CT / "srv/models/README").is_file()


# ---- systemd inside the container -----------------------------------------------------------------------

UNIT = """[Unit]
Description=gpuhosts inference service llm
[Service]
Type={type}
WorkingDirectory=/opt/gpuhosts/llm
Environment=HF_HUB_OFFLINE=1
EnvironmentFile=/etc/gpuhosts/llm.env
ExecStart=/opt/gpuhosts/llm/venv/bin/python /usr/local/lib/gpuhosts/sglang-serve.py \\
    --model-path /srv/models/Qwen3.6-27B --port 30000
Restart=on-failure
[Install]
WantedBy=multi-user.target
"""


def place_unit(host, typ="simple", env_file=True, venv=True):
    if venv:
        ct(host, BOOTSTRAP + '"$uv" venv -q "$venv"')
    (host / CT / "etc/systemd/system/llm.service").write_text(UNIT.format(type=typ))
    if env_file:
        (host / CT / "etc/gpuhosts").mkdir(parents=True)
        (host / CT / "etc/gpuhosts/llm.env").write_text("GPUHOSTS_API_KEY=k\n")


def test_service_in_container_enable_restart_disable(host):
    place_unit(host)
    before = tree_digest(host)
    p = ct(host, "systemctl daemon-reload && systemctl enable --now llm.service")
    assert "Created symlink /etc/systemd/system/multi-user.target.wants/llm.service" in p.stderr
    state = "systemctl is-active llm; systemctl is-enabled llm; systemctl show -p ActiveState,SubState llm"
    assert ct(host, state).stdout == "active\nenabled\nActiveState=active\nSubState=running\n"
    assert ct(host, "systemctl show -p ActiveState --value llm").stdout == "active\n"
    assert ct(host, "journalctl -u llm -n 50 --no-pager").stdout == ""
    ct(host, "systemctl restart llm && systemctl stop llm")
    assert ct(host, "systemctl is-active llm", check=False).stdout == "inactive\n"
    ct(host, "systemctl start llm")
    sh(host, "pct reboot 129")  # an enabled unit starts with its container
    assert ct(host, "systemctl is-active llm").stdout == "active\n"
    sh(host, "pct stop 129 && pct start 129 && reboot")
    assert ct(host, "systemctl is-active llm").stdout == "active\n"
    ct(host, "systemctl disable --now llm")
    assert ct(host, "systemctl is-active llm || systemctl is-enabled llm", check=False).stdout == "inactive\ndisabled\n"
    assert tree_digest(host) == before


@pytest.mark.parametrize("typ, env_file, venv, rc, state", [
    ("simple", True, True, 0, "active"),
    ("simple", False, True, 0, "failed"),   # EnvironmentFile= missing: the spawn fails after start returned
    ("simple", True, False, 0, "failed"),   # 203/EXEC: the venv is not there
    ("exec", True, False, 1, "failed"),     # Type=exec waits for the exec and reports it
])
def test_service_spawn_checks(host, typ, env_file, venv, rc, state):
    place_unit(host, typ, env_file, venv)
    p = ct(host, "systemctl enable --now llm", check=False)
    assert p.returncode == rc, p.stderr
    assert ct(host, "systemctl is-active llm", check=False).stdout == state + "\n"
