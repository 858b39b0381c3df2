"""Prints the real-engine tier's figure lines from build/pulumi-figures (written by its cases)."""

from __future__ import annotations

from realengine import pulumi_version
from realengine.conftest import read_figures

ORDER = ("cli", "kpro5", "trainer", "drift", "faults")


def line(kind: str, values: dict) -> str:
    words = " ".join(f"{key}={round(value, 1) if isinstance(value, float) else value}" for key, value in values.items())
    return f"{kind}: {words}"


def misses(found: dict[str, dict]) -> list[str]:
    """The goals the figures themselves state, each missed one named: a host not restored, drift not shown or not
    clean after its repair, a fault case that did not end as it must."""
    missed = [f"{name}: host_restored={values.get('host_restored')}" for name, values in found.items()
              if "host_restored" in values and values["host_restored"] != "yes"]
    drift = found.get("drift")
    if drift and not (drift["shown"] == drift["cases"] == drift["clean"]):
        missed.append(f"drift: cases={drift['cases']} shown={drift['shown']} clean={drift['clean']}")
    for name, key, goal in (("faults-interrupted", "interrupted_up", "converged"),
                            ("faults-parallel", "same_stack_locked", "yes"), ("faults-target", "target", "only_service"),
                            ("rollout-rolled", "failed", 0), ("rollout-gate-failure", "failed", 0),
                            ("rollout-gate-failure", "stopped_at_its_replica", "yes")):
        if name in found and found[name].get(key) != goal:
            missed.append(f"{name}: {key}={found[name].get(key)}, not {goal}")
    return missed


def main() -> int:
    found = read_figures()
    print(line("pulumi-cli", {"version": pulumi_version()}))
    for name, values in sorted(found.items(), key=lambda item: (ORDER.index(item[0].split("-")[0])
                                                                 if item[0].split("-")[0] in ORDER else 99, item[0])):
        kind = values.pop("line", "pulumi-real")
        print(line(kind, values if kind != "pulumi-real" else {"stack": name, **values}))
    hosts = {name.removeprefix("kpro5-"): values for name, values in read_figures().items()
             if name.startswith("kpro5-pve")}
    if hosts:
        restored = sum(values.get("host_restored") == "yes" for values in hosts.values())
        print(line("hosts", {"profiles": ",".join(sorted(hosts)), "kpro5_converged": f"{len(hosts)}/{len(hosts)}",
                             "destroy_restored": f"{restored}/{len(hosts)}"}))
    missed = misses(read_figures())
    for miss in missed:
        print(f"missed: {miss}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
