"""The config reference, generated from the pydantic models: one source for the schema and its documentation.

`python -m gpuhosts.schema_doc --write` rewrites the tables between their markers in docs/ (config-reference.md, and
the apply orders in architecture.md and training-node.md); the tests fail when the committed text differs from what
the models say. The apply order of each committed stack is generated the same way, from the unit graph its plan
builds, so the documentation cannot list the units in an order the plan does not follow.
"""

from __future__ import annotations

import re
import sys
import typing
from enum import Enum

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from gpuhosts.benchmarks import BenchmarkConfig
from gpuhosts.config import KIND_HELP, NAMESPACE, ContainerConfig, GpuConfig, HostConfig, MonitoringSpec, NvidiaConfig
from gpuhosts.plan import load_stack, read_stack_file, stand_in_secrets
from gpuhosts.render import PROJECT_ROOT
from gpuhosts.services import ServiceConfig
from gpuhosts.fleet import ENTRY_FIELD_HELP
from gpuhosts.training import MultiNodeConfig, NodeConfig, TrainingConfig

KINDS = {
    "proxmox": [("host", HostConfig, False), ("nvidia", NvidiaConfig, False), ("gpus[]", GpuConfig, True),
                ("containers[]", ContainerConfig, True), ("services[]", ServiceConfig, True),
                ("benchmarks[]", BenchmarkConfig, True), ("monitoring", MonitoringSpec, False)],
    "trainer": [("node", NodeConfig, False), ("training", TrainingConfig, False), ("multiNode", MultiNodeConfig, False),
                ("monitoring", MonitoringSpec, False)],
}
# A stack of several hosts: each entry of gpuhosts:hosts holds what a one-host stack spreads over its sections.
HOST_ENTRY_SECTIONS = ("nvidia", "gpus[]", "containers[]", "services[]", "benchmarks[]")
SECRETS = {
    "proxmox": [("sshPrivateKey", "secret: the SSH private key"),
                ("hfToken", "secret: Hugging Face token for gated repositories"),
                ("<apiKeySecret>", "secret: the API key clients send as `Authorization: Bearer …`")],
    "trainer": [("sshPrivateKey", "secret: the SSH private key"),
                ("hfToken", "secret: Hugging Face token for the gated starting drafter"),
                ("<monitor.tokenSecret>", "secret: the monitor's token (any bind beyond loopback)")],
}


def _model_of(annotation) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds, looked for through Optional and tuple/list, and whether it holds a list of them."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    listed = typing.get_origin(annotation) in (tuple, list)
    for argument in typing.get_args(annotation):
        model, inner_listed = _model_of(argument)
        if model is not None:
            return model, listed or inner_listed
    return None, False


def _value(value) -> str:
    return str(value.value) if isinstance(value, Enum) else str(value)


# A default the code derives where the stack leaves a field out (its Python default is None) is stated in the field's
# description, as `default X` or `Default: X`; a field required only with another is `required with/unless/for X`.
# The reference shows those words, not "none", which would read as "nothing happens".
DERIVED = re.compile(r"(?:^|[;.] |, )[Dd]efault:? (?!none\b|no\b)(?P<what>.+?)(?: — |\.(?: |$)|;|$)")
REQUIRED_WITH = re.compile(r"(?:^|[;.] |, )[Rr]equired (?P<when>(?:with|unless|for) .+?)(?:\.(?: |$)|;|$)")


def _default(field) -> str:
    if field.is_required():
        return "—"
    value = field.get_default(call_default_factory=True)
    if value is PydanticUndefined or value is None:
        description = field.description or ""
        required = REQUIRED_WITH.search(description)
        if required:
            return f"required {required['when']}"
        derived = DERIVED.search(description)
        if derived:
            what = derived["what"].strip()
            return f"`{what}`" if " " not in what or what.startswith("<") else what
        return "none"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, Enum):
        return f"`{value.value}`"
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(_value(v) for v in value) + "]`" if value else "none"
    if isinstance(value, dict):
        return "none" if not value else f"`{value}`"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"`{value}`"


def _cell(text: str) -> str:
    """Markdown for a table cell: `|` escaped, and outside code spans `<` and `>` as entities, so that a placeholder
    such as <repo> is shown, not taken for an HTML tag and dropped."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(part if index % 2 else part.replace("<", "&lt;").replace(">", "&gt;")
                    for index, part in enumerate(parts))


def key_of(model: type[BaseModel], name: str) -> str:
    """The key a stack file spells: the field's alias (camelCase), never its Python name."""
    field = model.model_fields[name]
    generator = model.model_config.get("alias_generator")
    return field.alias or (generator(name) if callable(generator) else name)


def _rows(model: type[BaseModel], prefix: str = ""):
    for name, field in model.model_fields.items():
        key = f"{prefix}{key_of(model, name)}"
        yield key, _cell(_default(field)), _cell(field.description or "")
        nested, listed = _model_of(field.annotation)
        if nested is not None:
            yield from _rows(nested, key + ("[]." if listed else "."))


def table(kind: str) -> str:
    lines = ["| key | field | default | meaning |", "| --- | --- | --- | --- |",
             f"| `{NAMESPACE}:kind` | | — | `{kind}`: which kind of stack this is |"]
    for section, model, _listed in KINDS[kind]:
        first = True
        for key, default, meaning in _rows(model):
            lines.append(f"| {f'`{NAMESPACE}:{section}`' if first else ''} | `{key}` | {default} | {meaning} |")
            first = False
    if kind == "proxmox":
        lines += hosts_rows()
    for key, meaning in SECRETS[kind]:
        lines.append(f"| `{NAMESPACE}:{key}` | | — | {meaning} |")
    return "\n".join(lines)


def hosts_rows() -> list[str]:
    """`gpuhosts:hosts[]`, instead of `host` and the host's sections: each entry is one host, its fields and its
    sections those of a one-host stack, with the fleet's own fields beside them."""
    lines = [f"| `{NAMESPACE}:hosts` | `[]` | none | Several hosts in one stack, instead of `{NAMESPACE}:host` and its "
             "sections: each entry is one host |",
             f"| | `[].<field>` | — | every field of `{NAMESPACE}:host` (name, ssh, bootloader, …), for this host |"]
    for name, help_text in ENTRY_FIELD_HELP.items():
        lines.append(f"| | `[].{name}` | {_cell(_help_default(help_text))} | {_cell(help_text)} |")
    for section in HOST_ENTRY_SECTIONS:
        key = section.removesuffix("[]")
        lines.append(f"| | `[].{section}` | — | as `{NAMESPACE}:{key}`, for this host |")
    return lines


def _help_default(text: str) -> str:
    found = DERIVED.search(text)
    return found["what"].strip() if found else "none"


def markers(kind: str) -> tuple[str, str]:
    return f"<!-- config reference: {kind} (generated: python -m gpuhosts.schema_doc --write) -->", \
        f"<!-- end of config reference: {kind} -->"


# Where the generated blocks live: both config references in one document, and each committed stack's apply order
# in the document whose prose describes its kinds of units in that order.
CONFIG_REFERENCE = "docs/config-reference.md"
ORDER_DOCS = {"kpro5": "docs/architecture.md", "trainer": "docs/training-node.md"}
ORDERED_STACKS = tuple(ORDER_DOCS)


def apply_order(stack: str) -> str:
    """The stack's units in the order `pulumi up` applies them, with what each waits for."""
    values, secure = read_stack_file(PROJECT_ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    values, secure, _warnings = stand_in_secrets(values, secure)
    _host, graph, _stack_warnings = load_stack(values, secure)
    lines = ["| # | unit | kind | waits for |", "| --- | --- | --- | --- |"]
    for number, unit in enumerate(graph.apply_order, 1):
        needs = ", ".join(f"`{key}`" for key in unit.needs) or "—"
        lines.append(f"| {number} | `{unit.key}` | {unit.kind} | {needs} |")
    return "\n".join(lines)


def order_markers(stack: str) -> tuple[str, str]:
    return f"<!-- apply order: {stack} (generated: python -m gpuhosts.schema_doc --write) -->", \
        f"<!-- end of apply order: {stack} -->"


def blocks() -> list[tuple[str, str, str, typing.Callable[[], str], str]]:
    """Each generated block: (its document, begin marker, end marker, what renders it, what it is)."""
    found = [(CONFIG_REFERENCE, *markers(kind), (lambda kind=kind: table(kind)), f"the {kind} config reference")
             for kind in KINDS]
    found += [(doc, *order_markers(stack), (lambda stack=stack: apply_order(stack)), f"the {stack} apply order")
              for stack, doc in ORDER_DOCS.items()]
    return found


GENERATED_DOCS = tuple(dict.fromkeys(doc for doc, *_ in blocks()))


def _replace_between(text: str, begin: str, end: str, body: str, what: str, doc: str) -> str:
    if begin not in text or end not in text:
        raise ValueError(f"{doc} lacks the markers of {what}: {begin} … {end}")
    head, rest = text.split(begin, 1)
    _old, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def rendered(text: str, doc: str) -> str:
    """`text`, the document `doc` (relative to the project), with each of its generated blocks as the code says."""
    for where, begin, end, body, what in blocks():
        if where == doc:
            text = _replace_between(text, begin, end, body(), what, doc)
    return text


def main(argv: list[str] | None = None) -> int:
    write = "--write" in (argv if argv is not None else sys.argv[1:])
    for doc in GENERATED_DOCS:
        path = PROJECT_ROOT / doc
        text = rendered(path.read_text(), doc)
        if write:
            path.write_text(text)
        else:
            sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def project_config() -> dict:
    """Pulumi.yaml's `config:` block: the keys every stack has (the CLI requires a declared key without a default in
    every stack), described as the models describe them."""
    return {
        f"{NAMESPACE}:kind": {"type": "string", "description": f"Which kind of stack this is; {KIND_HELP}."},
        f"{NAMESPACE}:sshPrivateKey": {"type": "string", "secret": True, "description": (
            "Private key for SSH to the host (pulumi config set --secret gpuhosts:sshPrivateKey < key).")},
    }
