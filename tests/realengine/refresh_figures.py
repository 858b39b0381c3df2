"""`make refresh-figures`: `pulumi refresh` of a stack of 1, 4, 16 and 64 simulated hosts through the real CLI, each
unit read alone and each host read in one command, with the SSH commands per host and the provider's own CPU time.

One kpro5 (its host side, as `gpuhosts:hosts` holds it) is converged by `pulumi up`; the others are copies of its
tree behind sshds of their own, and the stack's state is that host's resources once per host, each aimed at its
host and signed with the stack's key, brought in with `pulumi stack import`; one `pulumi up` then writes what differs
per host beyond its address (its name in the monitoring files). `pulumi preview` after the refreshes must show
nothing to do on any host.

    PYTHONPATH=tests python -m realengine.refresh_figures [COUNT …]
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from gpuhosts.fleet import FLEET_SECTIONS
from gpuhosts.provider import state_signature
from realengine import Stack, Project
from sshhost import SshHost
from sshhost.bed import Bed

COUNTERS = re.compile(r"^gpuhosts-provider: ssh_commands=(\d+) cpu_s=([\d.]+)$")
DEFAULT_COUNTS = (1, 4, 16, 64)


def host_name(index: int) -> str:
    return "kpro5" if index == 0 else f"kpro5-{index}"


def fleet_values(one: dict, hosts: list[SshHost]) -> dict:
    entries = []
    for index, ssh in enumerate(hosts):
        entry = {**copy.deepcopy(one["host"]), "gpus": copy.deepcopy(one["gpus"]),
                 "containers": copy.deepcopy(one["containers"]), "name": host_name(index)}
        entry["ssh"].update(host=ssh.host, port=ssh.port, user=ssh.user, hostKey=ssh.host_key)
        entries.append(entry)
    shared = {key: copy.deepcopy(one[key]) for key in FLEET_SECTIONS if key in one and key != "hosts"}
    return {**shared, "hosts": entries}


def cloned_state(deployment: dict, hosts: list[SshHost], private_key: str, source: str, stack: str) -> dict:
    """The one host's resources once per host: renamed, aimed at that host's sshd, signed."""
    resources = deployment["deployment"]["resources"]
    mine = [r for r in resources if "::kpro5/" in r["urn"] or r["urn"].endswith("::kpro5")]
    shared = [r for r in resources if r not in mine]
    out = list(shared)
    for index, ssh in enumerate(hosts):
        name = host_name(index)
        text = json.dumps(mine).replace("::kpro5/", f"::{name}/").replace('::kpro5"', f'::{name}"')
        for entry in json.loads(text):
            for section in ("inputs", "outputs"):
                target = (entry.get(section) or {}).get("host")
                if isinstance(target, dict):
                    target.update(address=ssh.host, port=ssh.port, user=ssh.user, hostKey=ssh.host_key)
            if "signature" in (entry.get("outputs") or {}):
                entry["outputs"]["signature"] = state_signature(entry["outputs"], private_key)
            out.append(entry)
    document = copy.deepcopy(deployment)
    document["deployment"]["resources"] = out
    return json.loads(json.dumps(document).replace(f"urn:pulumi:{source}::", f"urn:pulumi:{stack}::")
                      .replace(f"gpuhosts-{source}", f"gpuhosts-{stack}"))


def refresh(stack: Stack, batch: bool) -> dict:
    log = stack.project.provider_log
    offset = log.stat().st_size if log.exists() else 0
    stack.project.env["GPUHOSTS_REFRESH_BATCH"] = "1" if batch else "0"
    try:
        run = stack.refresh()
    finally:
        stack.project.env.pop("GPUHOSTS_REFRESH_BATCH")
    with log.open(encoding="utf-8") as lines:
        lines.seek(offset)
        counters = [(int(m[1]), float(m[2])) for m in map(COUNTERS.match, lines.read().splitlines()) if m]
    return {"s": round(run.seconds, 1), "ssh_commands": max(c for c, _ in counters),
            "provider_cpu_s": round(max(s for _, s in counters), 2)}


def main(counts: tuple[int, ...]) -> int:
    root = Path(tempfile.mkdtemp(prefix="gpuhosts-refresh-"))
    project = Project(root / "gpuhosts")
    template = Bed.seed(root / "template")
    started: list[SshHost] = [template.ssh]
    lines = []
    try:
        one = template.values()
        secrets = template.secrets()
        first = Stack(project, "fleet-of-1", "kpro5", fleet_values(one, [template.ssh]), secrets)
        first.up()
        units = sum(1 for r in first.export()["deployment"]["resources"] if r["type"].startswith("pulumi-python:dynamic/"))
        deployment = first.export()
        public = " ".join(template.ssh.private_key.with_suffix(".pub").read_text().split()[:2])
        for count in counts:
            while len(started) < count:
                index = len(started)
                tree = root / f"host-{index}" / "kpro5"
                shutil.copytree(template.tree, tree, symlinks=True)
                ssh = SshHost(tree, root / f"host-{index}" / "ssh").start()
                (ssh.workdir / "authorized_keys").write_text(public + "\n")
                started.append(ssh)
            hosts = started[:count]
            stack = Stack(project, f"fleet-{count}", "kpro5", fleet_values(one, hosts), secrets)
            state = root / f"state-{count}.json"
            state.write_text(json.dumps(cloned_state(deployment, hosts, secrets["sshPrivateKey"], first.name, stack.name)))
            stack.pulumi("stack", "import", "--file", str(state))
            # What differs per host beyond its address (its name in the monitoring files) is written by one `up`.
            stack.up()
            alone = refresh(stack, batch=False)
            together = refresh(stack, batch=True)
            pending = stack.preview().changed()
            if pending:
                raise AssertionError(f"{count} hosts: the imported state is not converged: {sorted(pending)[:10]}")
            line = (f"refresh: hosts={count} units_per_host={units} s={together['s']} "
                    f"ssh_commands_per_host={together['ssh_commands'] / count:g} "
                    f"provider_cpu_s={together['provider_cpu_s']} | alone: s={alone['s']} "
                    f"ssh_commands_per_host={alone['ssh_commands'] / count:g} "
                    f"provider_cpu_s={alone['provider_cpu_s']}")
            print(line, flush=True)
            lines.append(line)
    finally:
        for ssh in started:
            ssh.stop()
        shutil.rmtree(root, ignore_errors=True)
    out = Path("build/refresh-figures.txt")
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(tuple(int(a) for a in sys.argv[1:]) or DEFAULT_COUNTS))
