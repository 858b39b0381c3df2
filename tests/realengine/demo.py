"""`make demo`: gpuhosts converging kpro5 with the real Pulumi CLI, on a simulated Proxmox host over SSH on loopback.

A checkout of the product in build/demo with its own file backend and passphrase; kpro5's committed stack file
aimed at the simulated host (its SSH address, port and host key, the driver's `.run`, the services' ports) and its
secrets set with `pulumi config set --secret`; then `pulumi preview`, `pulumi up`, `pulumi stack output` and
`pulumi destroy`, each printed as the CLI prints it. Nothing leaves this machine.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from realengine import PROJECT, PULUMI_TOOLS, Project, Stack, pulumi_version
from realengine.hosts import SglangStandin
from sshhost import free_port
from sshhost.bed import Bed

DEMO = PROJECT / "build" / "demo"


def show(project: Project, stack: str, *args: str) -> None:
    print(f"\n$ pulumi {' '.join(args)}", flush=True)
    completed = subprocess.run([str(PULUMI_TOOLS / "pulumi"), *args, "--stack", stack], cwd=project.root,
                               env=project.env)
    if completed.returncode != 0:
        sys.exit(completed.returncode)


def main() -> None:
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir(parents=True)
    print(f"pulumi {pulumi_version()} (built by make pulumi), the project copied to {DEMO / 'gpuhosts'}")
    project = Project(DEMO / "gpuhosts")
    host = Bed.seed(DEMO / "kpro5-host")
    engine = SglangStandin()
    try:
        values = host.services_values(engine.port, free_port())
        print(f"a simulated kpro5 answers SSH on {host.ssh.host}:{host.ssh.port}; its tree is {host.tree}")
        Stack(project, "kpro5", "kpro5", values, host.secrets())
        show(project, "kpro5", "preview", "--diff")
        show(project, "kpro5", "up", "--yes", "--skip-preview")
        show(project, "kpro5", "stack", "output", "services", "--json")
        show(project, "kpro5", "up", "--yes", "--skip-preview")
        show(project, "kpro5", "destroy", "--yes", "--skip-preview")
        print(f"\nThe stack file with its encrypted secrets: {project.root / 'stacks' / 'Pulumi.kpro5.yaml'}")
    finally:
        engine.close()
        host.close()


if __name__ == "__main__":
    main()
