"""Hand-made changes to a converged host (drift), as data: what is done on the host, and what the preview must name.

Each case tampers over SSH as an operator would, then `pulumi preview` (with its refresh) must show the unit and
the field, `pulumi up` must run that unit's ensure and nothing else, and two previews after it must be clean.
`refuse` cases are drift that ensure must not repair: the preview shows it, `up` refuses, and nothing changes.
Read by tests/realengine/test_drift.py (through the real Pulumi CLI) and tests/realengine/test_check_cli.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable

from fakehost.hub import HubApi
from fakehost.installer import make_fake_run
from sshhost.bed import PROJECT

OTHER_DRIVER = "580.159.04"


@dataclass(frozen=True)
class Drift:
    name: str
    stack: str                          # kpro5 (with its services) or trainer
    tamper: Callable                    # (bed-like: .on_host(command) -> CompletedProcess, .root) -> None
    shown: dict[str, str]               # unit -> a fact name that must be among the diff's paths
    repaired_by: tuple[str, ...] = ()   # the units whose ensure runs; default: the units shown
    refuse: str = ""                    # for drift ensure must not repair: the words of the refusal
    names: dict[str, str] = field(default_factory=dict)  # unit -> words the refreshed value of its shown fact holds
    # Drift a refresh does not see (a byte outside the samples of a weight file): unit -> the field that
    # `gpuhosts check --deep` names, then `fix`, what its report tells the operator to do, makes it `shown`.
    deep: dict[str, str] = field(default_factory=dict)
    fix: Callable | None = None

    @property
    def repairs(self) -> tuple[str, ...]:
        return self.repaired_by or tuple(sorted(self.shown))


def on_host(command: str):
    def tamper(bed) -> None:
        result = bed.on_host(command)
        assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    return tamper


def other_driver_loaded(bed) -> None:
    """An apt upgrade brought another driver: its user space and its module, loaded after the upgrade."""
    run = bed.root / f"NVIDIA-Linux-x86_64-{OTHER_DRIVER}.run"
    make_fake_run(run, OTHER_DRIVER)
    on_host("systemctl stop gpuhosts-nvidia-persistenced.service && pct stop 129 && "
            f"for m in nvidia_uvm nvidia; do modprobe -r $m; done && sh {run} --silent --dkms && "
            "systemctl restart gpuhosts-nvidia-uvm.service && pct start 129")(bed)


def vm_takes_a_container_gpu(bed) -> None:
    on_host("printf 'name: grabber\\nhostpci0: 0000:61:00,pcie=1\\nmemory: 8192\\n' "
            ">\"$GPUHOSTS_HOST_ROOT/etc/pve/qemu-server/105.conf\" && "
            "systemctl disable --now gpuhosts-nvidia-persistenced.service && qm start 105")(bed)


def another_container_takes_a_gpu(bed) -> None:
    """CT 130, made by hand beside CT 129 and given CT 129's first A6000 (its node, /dev/nvidia<minor>), started:
    two containers on one GPU."""
    on_host('r="$GPUHOSTS_HOST_ROOT"; m="$(sed -n "s/^Device Minor:[[:space:]]*//p" '
            '"$r/proc/driver/nvidia/gpus/0000:41:00.0/information")" && mkdir -p "$r/var/lib/lxc/130/rootfs" && '
            'printf "arch: amd64\\nhostname: other\\nrootfs: local-zfs:subvol-130-disk-0,size=8G\\n'
            'unprivileged: 0\\ndev0: /dev/nvidia%s\\n" "$m" >"$r/etc/pve/lxc/130.conf" && pct start 130')(bed)


CONTAINER = 'pct exec 129 -- bash -c '
SGLANG = "gpuhosts-qwen-sglang.service"
PERSISTENCED = "gpuhosts-nvidia-persistenced.service"
MONITOR = "gpuhosts-training-monitor.service"


def in_container(script: str):
    return on_host(CONTAINER + shlex.quote(script))


def edited(unit: str, override: str, then: str = "") -> str:
    """What `systemctl edit UNIT` does with an editor that writes `override`: override.conf in the unit's drop-in
    directory, then a daemon-reload (systemctl(1) edit)."""
    folder = f'"${{GPUHOSTS_HOST_ROOT:-}}/etc/systemd/system/{unit}.d"'
    return (f"mkdir -p {folder} && printf {shlex.quote(override)} >{folder}/override.conf && systemctl daemon-reload"
            + (f" && {then}" if then else ""))


ROOT = '"${GPUHOSTS_HOST_ROOT:-}"'
SGLANG_VENV = "/opt/gpuhosts/qwen-sglang/venv"
QWEN, DRAFTER = "/srv/models/Qwen3.6-27B", "/srv/models/Qwen3.6-27B-DFlash"
CONVERTED = "/data/models/z-lab/Qwen3.6-27B-DFlash.speculators"
STAGED = "/data/data/qwen36-mix-913k"
# A byte of the middle shard that none of the refresh's three sampled MiB covers (the shard is 4.5 MiB).
FLIPPED_SHARD, FLIPPED_AT = "model-00002-of-00003.safetensors", 1280 * 1024


def installed_by_hand(requirement: str) -> str:
    """`uv pip install` into the engine's venv by hand, with the uv gpuhosts bootstrapped there."""
    return (f'{ROOT}/opt/gpuhosts/.uv/bin/uv pip install -q --python {ROOT}{SGLANG_VENV}/bin/python '
            f'{shlex.quote(requirement)}')


def byte_flipped_in_place(bed) -> None:
    """One bit of a weight shard flipped where it lies, its mtime kept (what a bad disk or a bad copy leaves): hf's
    metadata still vouches for the file, and the refresh's samples do not cover the byte."""
    shard = bed.tree / "var/lib/lxc/129/rootfs" / QWEN.lstrip("/") / FLIPPED_SHARD
    stat = shard.stat()
    with shard.open("r+b") as handle:
        handle.seek(FLIPPED_AT)
        byte = handle.read(1)
        handle.seek(FLIPPED_AT)
        handle.write(bytes([byte[0] ^ 0x01]))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def masked(unit: str) -> str:
    """`systemctl mask --now` refuses a unit whose file is in /etc/systemd/system ("File … already exists."), so the
    file goes first, as an operator has to do."""
    return f'rm "${{GPUHOSTS_HOST_ROOT:-}}/etc/systemd/system/{unit}" && systemctl mask --now {unit}'


DRIFTS = [
    Drift("devN removed from CT 129", "kpro5",
          on_host("pct set 129 --delete \"$(pct config 129 | sed -n 's|^\\(dev[0-9]*\\): /dev/nvidiactl$|\\1|p')\""),
          {"ct129-gpu-devices": 'facts["device /dev/nvidiactl"]'}),
    Drift("3090 override file deleted", "kpro5",
          on_host('rm "$GPUHOSTS_HOST_ROOT/usr/local/lib/gpuhosts/vfio-override.sh"'),
          {"vfio-binding": 'facts["file /usr/local/lib/gpuhosts/vfio-override.sh"]'}),
    Drift("IOMMU argument removed from /etc/kernel/cmdline", "kpro5",
          on_host('sed -i "s/ iommu=pt//" "$GPUHOSTS_HOST_ROOT/etc/kernel/cmdline"'),
          {"vfio-binding": 'facts["kernel argument iommu=pt"]'}),
    Drift("nvidia-persistenced disabled", "kpro5",
          on_host("systemctl disable --now gpuhosts-nvidia-persistenced.service"),
          {"nvidia-driver": 'facts["systemd gpuhosts-nvidia-persistenced.service"]'}),
    Drift("persistence mode turned off on the A6000s", "kpro5",
          on_host("nvidia-smi -i 0000:41:00.0 -pm 0 && nvidia-smi -i 0000:61:00.0 -pm 0"),
          {"nvidia-driver": 'facts["persistence mode 0000:41:00.0"]'}, names={"nvidia-driver": "Disabled"}),
    Drift("service unit edited by hand", "kpro5",
          on_host(CONTAINER + "'printf \"Nice=5\\n\" >>\"${GPUHOSTS_HOST_ROOT:-}/etc/systemd/system/gpuhosts-qwen-sglang.service\"'"),
          {"ct129-service-qwen-sglang": 'facts["file /etc/systemd/system/gpuhosts-qwen-sglang.service"]'}),
    Drift("service stopped", "kpro5", on_host(CONTAINER + "'systemctl stop gpuhosts-qwen-sglang.service'"),
          {"ct129-service-qwen-sglang": 'facts["systemd gpuhosts-qwen-sglang.service"]'}),
    Drift("another driver loaded, the container's user space no longer matches", "kpro5", other_driver_loaded,
          {"nvidia-driver": 'facts["loaded module"]', "ct129-nvidia-userspace": 'facts["host module"]'}),
    Drift("model weights deleted", "kpro5",
          on_host(CONTAINER + "'rm -rf \"${GPUHOSTS_HOST_ROOT:-}/srv/models/Qwen3.6-27B\"'"),
          {"ct129-model-qwen3-6-27b": 'facts["weights /srv/models/Qwen3.6-27B"]'}),
    # What the environment holds, not what gpuhosts last wrote: the seed's SGLang 0.5.9 over the lock's 0.5.11.
    Drift("SGLang 0.5.9 installed into the engine's venv", "kpro5", in_container(installed_by_hand("sglang==0.5.9")),
          {"ct129-env-qwen-sglang": f'facts["sglang in {SGLANG_VENV}"]'},
          names={"ct129-env-qwen-sglang": "sglang 0.5.9"}),
    # The running engine keeps the key it started with, so its gate's re-check, which reads the file, is refused.
    Drift("the API-key file rewritten with another key", "kpro5",
          in_container(f"printf 'GPUHOSTS_API_KEY=sk-someone-elses-key\\n' >{ROOT}/etc/gpuhosts/qwen-sglang.env"),
          {"ct129-service-qwen-sglang": 'facts["key file /etc/gpuhosts/qwen-sglang.env"]',
           "ct129-gate-qwen-sglang": 'facts["model served by qwen-sglang"]'},
          names={"ct129-service-qwen-sglang": "not gpuhosts:llmApiKey (another value)",
                 "ct129-gate-qwen-sglang": "/v1/models answered 401"}),
    Drift("the downloaded drafter's sliding_window changed", "kpro5",
          in_container(f"sed -i 's/\"sliding_window\": 2048/\"sliding_window\": 4096/' {ROOT}{DRAFTER}/config.json"),
          {"ct129-model-qwen3-6-27b-dflash": f'facts["small files of {DRAFTER}"]'},
          names={"ct129-model-qwen3-6-27b-dflash": "config.json: blob"}),
    Drift("a weight shard cut short", "kpro5",
          in_container(f"truncate -s -100 {ROOT}{QWEN}/model-00003-of-00003.safetensors"),
          {"ct129-model-qwen3-6-27b": f'facts["weight files of {QWEN}"]'},
          names={"ct129-model-qwen3-6-27b": "model-00003-of-00003.safetensors: 3348 bytes, downloaded 3448"}),
    # The refresh samples a shard and misses this byte (asserted); the deep check reads it whole and names the file,
    # whose removal its report asks for; the refresh then finds it missing and the download fetches it again.
    Drift("a flipped byte in a weight shard, found by gpuhosts check --deep", "kpro5", byte_flipped_in_place,
          {"ct129-model-qwen3-6-27b": f'facts["weight files of {QWEN}"]'},
          names={"ct129-model-qwen3-6-27b": f"{FLIPPED_SHARD} missing"},
          deep={"ct129-model-qwen3-6-27b": f"Hub sha256 of {FLIPPED_SHARD}"},
          fix=in_container(f"rm {ROOT}{QWEN}/{FLIPPED_SHARD}")),
    Drift("hidden-state server unit removed", "trainer",
          on_host('rm "$GPUHOSTS_HOST_ROOT/etc/systemd/system/gpuhosts-hidden-state-server.service"'),
          {"hidden-state-server": 'facts["file /etc/systemd/system/gpuhosts-hidden-state-server.service"]'}),
    Drift("the converted drafter's config.json edited", "trainer",
          on_host(f"sed -i 's/\"sliding_window\": 2048/\"sliding_window\": 4096/' "
                  f'"$GPUHOSTS_HOST_ROOT{CONVERTED}/config.json"'),
          {"drafter-convert": f'facts["converted config {CONVERTED}/config.json"]'},
          names={"drafter-convert": "edited since the conversion"}),
    # A staged shard checked by content: cut short (a disk that filled while copying it back), it is seen on the
    # refresh although the manifest still names it, and the data set's ensure fetches it again.
    Drift("a staged data set shard cut short", "trainer",
          on_host(f'truncate -s -16 "$GPUHOSTS_HOST_ROOT{STAGED}/shards/train-00001.arrow"'),
          {"dataset-qwen36-mix-913k": f'facts["content of {STAGED}"]'},
          names={"dataset-qwen36-mix-913k": "shards/train-00001.arrow: "}),
    # gpuhosts:monitoring.filesDir of the committed stacks (the default); the rule file a Prometheus loads.
    Drift("the alert rule file deleted", "trainer",
          on_host('rm "$GPUHOSTS_HOST_ROOT/etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-trainer.rules.yml"'),
          {"monitoring-files": 'facts["file /etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-trainer.rules.yml"]'},
          names={"monitoring-files": "missing"}),
    # A newer exporter from the same repository, as an `apt-get upgrade` brings it: its metric names may differ
    # from the catalog's, so the stack holds it (gpuhosts:monitoring.dcgmExporterVersion).
    Drift("the DCGM exporter upgraded by hand", "kpro5",
          on_host("apt-get install -y datacenter-gpu-manager-exporter=4.9.0-1 >/dev/null"),
          {"dcgm-exporter": 'facts["package datacenter-gpu-manager-exporter"]'},
          names={"dcgm-exporter": "4.9.0-1"}),
    Drift("monitor unit edited", "trainer",
          on_host('printf "Nice=5\\n" >>"$GPUHOSTS_HOST_ROOT/etc/systemd/system/gpuhosts-training-monitor.service"'),
          {"training-monitor": 'facts["file /etc/systemd/system/gpuhosts-training-monitor.service"]'}),
    Drift("a drop-in changes ExecStart of the SGLang service", "kpro5",
          in_container(edited(SGLANG, "[Service]\nExecStart=\nExecStart=/opt/gpuhosts/qwen-sglang/venv/bin/python "
                                      "/usr/local/lib/gpuhosts/sglang-serve.py --model-path /srv/models/Qwen3.6-27B "
                                      "--port 30001\n", f"systemctl restart {SGLANG}")),
          {"ct129-service-qwen-sglang": f'facts["ExecStart of {SGLANG}"]'}),
    Drift("a drop-in adds Environment to the SGLang service", "kpro5",
          in_container(edited(SGLANG, "[Service]\nEnvironment=SGLANG_ENABLE_TORCH_COMPILE=1\n",
                              f"systemctl restart {SGLANG}")),
          {"ct129-service-qwen-sglang": f'facts["Environment of {SGLANG}"]'}),
    Drift("the SGLang service masked", "kpro5", in_container(masked(SGLANG)),
          {"ct129-service-qwen-sglang": f'facts["systemd {SGLANG}"]'}),
    Drift("nvidia-persistenced given a drop-in", "kpro5",
          on_host(edited(PERSISTENCED, "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced "
                                       "--no-persistence-mode\n")),
          {"nvidia-driver": f'facts["DropInPaths of {PERSISTENCED}"]'}),
    Drift("the monitor unit masked", "trainer", on_host(masked(MONITOR)),
          {"training-monitor": f'facts["systemd {MONITOR}"]'}),
    Drift("the SGLang service disabled", "kpro5", in_container(f"systemctl disable {SGLANG}"),
          {"ct129-service-qwen-sglang": f'facts["systemd {SGLANG}"]'}),
    # The monitor reads the trainer's output; another user may not, and would not hold the port's binding either.
    Drift("a drop-in runs the monitor as another user", "trainer",
          on_host(edited(MONITOR, "[Service]\nUser=nobody\n", f"systemctl restart {MONITOR}")),
          {"training-monitor": f'facts["User of {MONITOR}"]'}, names={"training-monitor": "nobody"}),
    Drift("a running VM holds a GPU meant for the container", "kpro5", vm_takes_a_container_gpu,
          {"vfio-binding": 'facts["running VM with 0000:61:00"]',
           "ct129-gpu-devices": 'facts["other guests on 0000:61:00.0"]',
           "nvidia-driver": 'facts["systemd gpuhosts-nvidia-persistenced.service"]',
           "nvidia-uvm-at-boot": 'facts["node of GPU 0000:61:00.0"]'},
          refuse="VM 105 is running with 0000:61:00 passed through",
          names={"vfio-binding": "VM 105", "ct129-gpu-devices": "VM 105 (running with 0000:61:00 in hostpci)"}),
    Drift("another running container holds a GPU of CT 129", "kpro5", another_container_takes_a_gpu,
          {"ct129-gpu-devices": 'facts["other guests on 0000:41:00.0"]'},
          refuse="Let the other guest go (pct stop 130 && pct set 130 --delete dev0)",
          names={"ct129-gpu-devices": "CT 130 (running with dev0: /dev/nvidia"}),
]


# The stack file `gpuhosts check` reads: the SSH key only as a `secure:` value the Pulumi CLI alone decrypts.
SECURE = {"secure": "v1:AAABAGxvY2tlZC1ieS10aGUtY2xpLW5vdC1oZXJlCg=="}


def deep_check(bed, values) -> tuple[int, dict]:
    """`gpuhosts check kpro5 --deep --json` against the bed, the Hub's listing served from its own registry."""
    stack = bed.write_stack({**values, "sshPrivateKey": SECURE})
    api = HubApi(bed.tree)
    try:
        environment = {k: v for k, v in os.environ.items() if k not in ("GPUHOSTS_SSH_KEY_FILE", "HF_TOKEN")}
        result = subprocess.run([sys.executable, "-m", "gpuhosts.cli", "check", "kpro5", "--stack-file", str(stack),
                                 "--ssh-key", str(bed.ssh.private_key), "--deep", "--json"], capture_output=True,
                                text=True, cwd=PROJECT, env={**environment, "HF_ENDPOINT": api.endpoint}, timeout=300)
    finally:
        api.close()
    assert re.search(r"^deep-check: ct129-model-qwen3-6-27b bytes=\d+ seconds=", result.stderr, re.M), result.stderr
    return result.returncode, json.loads(result.stdout)
