"""A simulated training node for the tests: the converged kpro5 tree stands in for a machine whose driver is
installed (its two RTX A6000 are the node's GPUs), with a python3, a local speculators repository, a data set to
stage from a file:// source, the trainer stack aimed at them, and a hidden-state server stand-in."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import struct
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gpuhosts.plans.proxmox_host import plan_host
from conftest import KPRO5_SECRETS, kpro5_values, trainer_values
from fakehost import host_env
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5
from gpuhosts.stacks import validate_stack
from sshhost import free_port

VERSION = "580.126.09"



def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    """A safetensors file written the way the format defines it (header length, JSON header, data)."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


class StateServer:
    """The hidden-state server's outside: /health, and /v1/completions that names one sample's states file and writes
    it after the response, as vLLM 0.26.0's ExampleHiddenStatesConnector does
    (vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py): `<file>.lock` created and
    held with an exclusive flock before the response (wait_for_save), the path in the response's
    kv_transfer_params.hidden_states_path (request_finished), the file written by another thread and the lock
    released only after it is complete (_write_tensors). `writes` lists the node paths named."""

    def __init__(self, states: Path, port: int, zeros: bool = False, node_dir: str = "/data/hidden_states"):
        self.states, self.zeros, self.node_dir = states, zeros, node_dir
        self.writes: list[str] = []
        self.writers: list[threading.Thread] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, body: bytes, status: int = 200):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

            def do_GET(self):
                self.reply(b"" if self.path == "/health" else b"not found", 200 if self.path == "/health" else 404)

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                name = f"req-{len(outer.writes) + 1:04d}.safetensors"
                outer.states.mkdir(parents=True, exist_ok=True)
                target = outer.states / name
                lock_fd = os.open(f"{target}.lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                outer.writes.append(f"{outer.node_dir}/{name}")
                self.reply(json.dumps({"choices": [{"text": "x"}],
                                       "kv_transfer_params": {"hidden_states_path": outer.writes[-1]}}).encode())
                writer = threading.Thread(target=outer.write, args=(target, lock_fd))
                outer.writers.append(writer)
                writer.start()

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def write(self, target: Path, lock_fd: int) -> None:
        try:
            # [num_tokens, num_hidden_states, hidden_size], as the connector's extract_from_kv_cache gathers them:
            # 2 tokens, the trainer stack's 6 extracted layers, a hidden size of 4.
            values = [0.0] * 48 if self.zeros else [0.5 * (i % 7 - 3) for i in range(48)]
            target.write_bytes(safetensors_bytes(
                {"hidden_states": ("F32", [2, 6, 4], struct.pack("<48f", *values)),
                 "token_ids": ("I64", [2], struct.pack("<2q", *range(2)))}))
        finally:
            os.close(lock_fd)  # releases LOCK_EX

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        for writer in self.writers:
            writer.join()


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True)


def converged_kpro5(root: Path, name: str) -> Path:
    """The seed's kpro5 under root/name with its host units applied (driver loaded, devices in CT 129)."""
    run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    sha = make_fake_run(run_file, VERSION)
    tree = seed_kpro5(root / name)
    values = kpro5_values()
    values["nvidia"].update(url=f"file://{run_file}", sha256=sha)
    values.pop("services")
    values.pop("benchmarks", None)  # a benchmark compares services: none without them
    values.pop("monitoring", None)  # the driver is what the node needs of the host; its exporters are the node's own
    for unit in plan_host(validate_stack(values, KPRO5_SECRETS)):
        result = subprocess.run(["bash", "-c", unit.ensure], capture_output=True, text=True, env=host_env(tree))
        assert result.returncode == 0, result.stderr
    return tree


def prepare_node(root: Path) -> Path:
    """A node tree with its driver loaded under root/node, a speculators repository and a data set beside it."""
    tree = converged_kpro5(root, "node")
    # The node's own python3 (a training node is a plain machine: its python3 bootstraps uv).
    shutil.copy(tree / "var/lib/lxc/129/rootfs/usr/bin/python3", tree / "usr/bin/python3")

    repo = root / "speculators"
    (repo / "scripts").mkdir(parents=True)
    for script in ("launch_vllm.py", "train.py", "prepare_data.py"):
        (repo / "scripts" / script).write_text(f"# speculators {script} (test repository)\n")
    git("init", "-q", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "v0.7.0", cwd=repo)
    git("tag", "v0.7.0", cwd=repo)

    data = root / "dataset"
    (data / "shards").mkdir(parents=True)
    for index in range(3):
        (data / "shards" / f"train-{index:05d}.arrow").write_bytes(bytes([index]) * 4096)
    (data / "dataset_info.json").write_text(json.dumps({"samples": 913786}))
    sums = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(data).as_posix()}\n"
                   for p in sorted(data.rglob("*")) if p.is_file())
    (data / "SHA256SUMS").write_text(sums)
    return tree


def node_values(root: Path) -> dict:
    """The trainer stack aimed at the node prepared under `root`: its two GPUs, small sizes, local sources."""
    values = trainer_values()
    values["node"].update(gpus={"count": 2, "model": "RTX A6000"}, driverVersion=VERSION)
    training = values["training"]
    training["server"].update(gpus=[0], tensorParallelSize=1, port=free_port())
    training["trainingGpus"] = [1]
    # a repository of its own: its tag's commit pins the scripts the node checks out
    commit = subprocess.run(["git", "rev-parse", "v0.7.0^{commit}"], cwd=root / "speculators", check=True,
                            capture_output=True, text=True).stdout.strip()
    training["speculators"].update(repository=f"file://{root / 'speculators'}", scriptsCommit=commit)
    training["verifier"]["sizeGb"] = 1
    training["drafter"]["sizeGb"] = 1
    training["checkpointsReserveGb"] = 1
    # The node's own tests stage a pre-made set (DatasetStage); the declared mix is prepared in
    # tests/test_dataset_prepare_unit.py.
    for declared in ("mix", "seed"):
        training["dataset"].pop(declared, None)
    training.pop("smoke", None)  # a smoke run draws from a mix; tests/test_dataset_prepare_unit.py runs one
    manifest = (root / "dataset" / "SHA256SUMS").read_bytes()
    training["dataset"].update(source=f"file://{root / 'dataset'}/", manifestSha256=hashlib.sha256(manifest).hexdigest(),
                               sizeGb=0.1)
    return values
