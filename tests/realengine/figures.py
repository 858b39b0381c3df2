"""Prints the real-engine tier's figure lines from build/pulumi-figures (written by its cases)."""

from __future__ import annotations

from realengine import pulumi_version
from realengine.conftest import read_figures

ORDER = ("cli", "kpro5", "trainer", "drift", "faults")


def line(kind: str, values: dict) -> str:
    words = " ".join(f"{key}={round(value, 1) if isinstance(value, float) else value}" for key, value in values.items())
    return f"{kind}: {words}"


def main() -> None:
    found = read_figures()
    print(line("pulumi-cli", {"version": pulumi_version()}))
    for name, values in sorted(found.items(), key=lambda item: (ORDER.index(item[0].split("-")[0])
                                                                 if item[0].split("-")[0] in ORDER else 99, item[0])):
        kind = values.pop("line", "pulumi-real")
        print(line(kind, values if kind != "pulumi-real" else {"stack": name, **values}))


if __name__ == "__main__":
    main()
