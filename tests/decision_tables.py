"""What the units' decision tables share (tests/cases/<kind>.yaml): loading a table, running a decision module's
`main` as its script runs it, and the check that each refusal the module writes has a case."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import yaml

CASES = Path(__file__).parent / "cases"


def table(kind: str) -> dict:
    return yaml.safe_load((CASES / f"{kind}.yaml").read_text())


def flat(expect: list) -> list[list[str]]:
    """A case's expected actions, each as strings, with the lists a YAML anchor nests in them laid flat."""
    out = []
    for item in expect:
        out += flat(item) if item and isinstance(item[0], list) else [[str(part) for part in item]]
    return out


def decided(module, argv: list[str], stdin) -> list[list[str]]:
    """The actions `module.main(argv)` prints for the facts on `stdin`, each split at its tabs."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert module.main(argv, stdin) == 0
    return [line.split("\t") for line in out.getvalue().splitlines()]


def refusals_without_case(module, refusals: list[str]) -> list[str]:
    """Each refusal written in `module` whose longest literal run is in none of `refusals`."""
    source = Path(module.__file__).read_text()
    sites = re.findall(r'(?:\("refuse", f|raise Refused\(f?)"((?:[^"\\]|\\.)*)"', source)
    assert sites, f"{module.__name__} refuses nothing?"
    return [site for site in sites
            if not any(max(re.split(r"\{[^}]*\}", site.replace('\\"', '"')), key=len) in refusal
                       for refusal in refusals)]
