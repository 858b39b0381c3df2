"""`make fleet-figures`: what a stack of several hosts costs against its size, on simulated hosts over real SSH.

For 1, 4 and 16 hosts (kpro5's seed each, behind an sshd of its own on loopback), a converge from the seed and then
an in-sync refresh in one provider process, as a preview's refresh runs; then the offline plan of 1, 4, 16 and 64
hosts like kpro5 with its services. One line each, in a form to compare across changes:

    load: 1m=<l> 5m=<l> 15m=<l> cores=<n>                     (before the first figure; the machine's load)
    fleet: hosts=<n> refresh_s=<s> connections=<n> units=<n> host_cpu_s=<s> converge_s=<s>
    plan: hosts=<n> seconds=<s> resources=<n>

connections counts the provider's dials during the refresh (one per host when every host answers). The simulated
hosts run their probes on this machine's cores, beside the provider: on real hosts that work is theirs. host_cpu_s
is what the hosts spent of it (their probes, shells and stand-ins), so host_cpu_s / cores bounds the refresh here
from below, whatever the provider does. Pulumi's
dynamic-provider server answers at most 4 calls at once (pulumi sdk/python/lib/pulumi/dynamic/__main__.py:
`futures.ThreadPoolExecutor(max_workers=4)`), whatever the engine's parallelism, and every unit of every host goes
through that one server. `--hosts 1,4` and `--plan-hosts 64` choose the sizes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from lifecycle_figures import timed_refresh

TESTS = Path(__file__).resolve().parent
PROJECT = TESTS.parent


def main() -> int:
    sys.path[:0] = [str(TESTS), str(PROJECT)]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,4,16", help="fleet sizes to converge and refresh (default 1,4,16)")
    parser.add_argument("--plan-hosts", default="1,4,16,64", help="fleet sizes to plan (default 1,4,16,64)")
    args = parser.parse_args()
    one, five, fifteen = os.getloadavg()
    print(f"load: 1m={one:.2f} 5m={five:.2f} 15m={fifteen:.2f} cores={os.cpu_count()}", flush=True)
    lines: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="gpuhosts-fleet-"))
    try:
        for count in [int(n) for n in args.hosts.split(",") if n]:
            lines.append(fleet_line(root / f"fleet-{count}", count))
            print(lines[-1], flush=True)
        for count in [int(n) for n in args.plan_hosts.split(",") if n]:
            lines.append(plan_line(root / f"plan-{count}", count))
            print(lines[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    one, five, fifteen = os.getloadavg()
    print(f"load: 1m={one:.2f} 5m={five:.2f} 15m={fifteen:.2f} cores={os.cpu_count()}")
    print("\n".join(lines))
    return 0


def fleet_line(root: Path, count: int) -> str:
    from sshhost.fleet import Fleet

    fleet = Fleet.seed(root, count)
    try:
        program = fleet.program()
        began = time.monotonic()
        fleet.up(program=program)
        converge = time.monotonic() - began
        engine = fleet.engine
        before = host_cpu_seconds(fleet)
        refresh, units, drifted = timed_refresh(engine)
        host_cpu = host_cpu_seconds(fleet) - before
        suffix = f" drifted={sorted(drifted)}" if drifted else ""
        return (f"fleet: hosts={count} refresh_s={refresh:.2f} connections={engine.connections()} units={units} "
                f"host_cpu_s={host_cpu:.2f} converge_s={converge:.1f}{suffix}")
    finally:
        fleet.close()


def host_cpu_seconds(fleet) -> float:
    """CPU seconds the simulated hosts have spent on finished connections: each sshd reaps the connection's process,
    which reaped the sessions and the probes they ran, so their time is in the sshd's cutime and cstime
    (proc(5) /proc/pid/stat fields 16 and 17). Read once the provider process, and so its connections, ended."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for host in fleet.hosts:
        if not host.ssh.wait_idle():
            raise RuntimeError(f"{host.name}: a connection outlived the provider process")
        fields = Path(f"/proc/{host.ssh.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[13]) + int(fields[14])  # cutime, cstime: fields 16 and 17, after pid and comm
    return total / ticks


def plan_line(root: Path, count: int) -> str:
    import yaml

    from conftest import kpro5_values
    from fleet_data import fleet_values
    from gpuhosts.plan import write_plan

    document = {"config": {f"gpuhosts:{key}": value for key, value in
                           fleet_values(kpro5_values(), count, migrated=False).items()}}
    root.mkdir(parents=True)
    stack_file = root / "Pulumi.fleet.yaml"
    stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
    began = time.monotonic()
    write_plan(PROJECT, "fleet", stack_file, root / "plan")
    seconds = time.monotonic() - began
    resources = (root / "plan" / "resources.json").read_text().count('"urn":')
    return f"plan: hosts={count} seconds={seconds:.1f} resources={resources}"


if __name__ == "__main__":
    sys.exit(main())
