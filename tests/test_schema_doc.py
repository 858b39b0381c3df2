"""The config reference (docs/config-reference.md) is what the typed models say, and the apply orders in docs/ are what
the plans do: regenerate them with `python -m gpuhosts.schema_doc --write` when a field, default or description
changes."""

from __future__ import annotations

import pytest

from conftest import PROJECT
from gpuhosts.schema_doc import GENERATED_DOCS, KINDS, rendered, table


@pytest.mark.parametrize("doc", GENERATED_DOCS)
def test_the_committed_generated_blocks_are_the_generated_ones(doc):
    text = (PROJECT / doc).read_text()
    assert rendered(text, doc) == text, f"{doc} is stale: python -m gpuhosts.schema_doc --write"


def test_the_readme_points_at_every_generated_document():
    readme = (PROJECT / "README.md").read_text()
    assert "<!-- config reference" not in readme and "<!-- apply order" not in readme
    for doc in GENERATED_DOCS:
        assert f"]({doc})" in readme, doc


def test_every_field_of_every_section_is_in_it():
    for kind, sections in KINDS.items():
        text = table(kind)
        for section, model, _listed in sections:
            assert f"`gpuhosts:{section}`" in text
            for name, field in model.model_fields.items():
                assert f"`{field.alias or name}`" in text or f".{field.alias or name}`" in text, (kind, section, name)


def rows(kind: str) -> dict[str, tuple[str, str]]:
    """key (within its section) -> (default, meaning) of the generated table."""
    import re

    found = {}
    for line in table(kind).splitlines()[2:]:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells[1]:
            found[cells[1].strip("`")] = (cells[2], cells[3])
    return found


def keys(model, prefix=""):
    """Every key a stack file can spell below a model, as the stack file spells it (aliases), lists as `[]`."""
    from gpuhosts.schema_doc import _model_of, key_of

    for name, field in model.model_fields.items():
        key = prefix + key_of(model, name)
        yield key
        nested, listed = _model_of(field.annotation)
        if nested is not None:
            yield from keys(nested, key + ("[]." if listed else "."))


def test_every_nested_field_is_in_it_by_the_key_a_stack_file_spells():
    for kind, sections in KINDS.items():
        found = rows(kind)
        for _section, model, _listed in sections:
            for key in keys(model):
                assert key in found, (kind, key)
        # A Python field name is never what a stack file spells (`local_dir`): the models take camelCase keys.
        assert [key for key in found if "_" in key] == [], kind


# The trainer's rows checked against gpuhosts/training.py: what the node does when the key is left out.
TRAINER_ROWS = {
    "verifier.localDir": ("`<storage>/models/<repo>`", "on the node"),
    "drafter.localDir": ("`<storage>/models/<repo>`", "on the node"),
    "drafter.repo": ("—", "`z-lab/Qwen3.6-27B-DFlash`"),
    "verifier.repo": ("—", "`Qwen/Qwen3.6-27B`"),
    "verifier.numLayers": ("from the known-models table of compat-rules.yaml", ""),
    "drafter.targetLayerIds": ("derived from the target (evenly spaced from 1 to N-3)", ""),
    "speculators.repository": ("the project's upstream", ""),
    "hyper.layerTypes": ("read from config.json", ""),
    "hyper.maskTokenId": ("read from config.json, never pasted", ""),
    "checkpoints": ("`<storage>/checkpoints/<drafter name>`", "Default &lt;storage&gt;/checkpoints/"),
    "ssh.hostKey": ("required unless insecureIgnoreHostKey", ""),
    "ssh.user": ("`root`", "needs root"),
    "dataset.manifestSha256": ("required with source", ""),
    "dataset.seed": ("required with mix", ""),
    "dataset.mix[].revision": ("—", "40-hex commit"),
    "dataset.mix[].split": ("`train`", ""),
    "monitor.tokenSecret": ("required for any bind other than 127.0.0.1", ""),
    "server.gpus": ("`[0, 1, 2, 3]`", ""),
    "server.extraArgs": ("none", ""),
}


@pytest.mark.parametrize("key", TRAINER_ROWS)
def test_the_trainer_rows_say_what_the_models_do(key):
    default, words = TRAINER_ROWS[key]
    found = rows("trainer")[key]
    assert found[0] == default and words in found[1], found


def test_a_derived_default_is_shown_never_none():
    """A field whose Python default is None but whose description names what the code does instead (`default X`,
    `required with X`) shows that, not "none", which reads as "nothing happens"."""
    import re

    for kind in KINDS:
        for key, (default, meaning) in rows(kind).items():
            named = re.search(r"(?i)\b(default:? (?!none\b|no\b)|required (with|unless|for) )", meaning)
            assert not (default == "none" and named), (kind, key, meaning)


def test_enum_defaults_are_the_values_a_stack_file_spells():
    assert rows("proxmox")["measure"][0] == (
        "`[decodeTokensPerS, ttftS, acceptanceLength, acceptanceRate, longContextDecodeRatio]`")
    assert "Measure." not in table("proxmox")


def test_a_placeholder_outside_code_is_escaped_so_markdown_shows_it():
    from gpuhosts.schema_doc import _cell

    assert _cell("under <storage>/data, `<repo>` | x") == "under &lt;storage&gt;/data, `<repo>` \\| x"


def test_pulumi_yaml_declares_what_the_models_say_every_stack_has():
    import yaml

    from gpuhosts.schema_doc import project_config

    assert yaml.safe_load((PROJECT / "Pulumi.yaml").read_text())["config"] == project_config()


def test_the_docs_describe_the_kinds_of_units_in_the_order_the_plan_applies_them():
    import re

    from gpuhosts.schema_doc import ORDER_DOCS, ORDERED_STACKS, apply_order

    for stack in ORDERED_STACKS:
        readme = (PROJECT / ORDER_DOCS[stack]).read_text()
        kinds = list(dict.fromkeys(re.findall(r"^\| \d+ \| `[^`]+` \| (\w+) \|", apply_order(stack), re.M)))
        # The prose that follows the stack's generated table describes each kind in bold, in its own order.
        after = readme.split(f"<!-- end of apply order: {stack} -->", 1)[1].split("\n#", 1)[0]
        heads = [line.split(" — ", 1)[0] for line in after.splitlines() if line.startswith("- **")]
        described = [kind for head in heads for kind in re.findall(r"\*\*(\w+)\*\*", head) if kind in kinds]
        assert described == [kind for kind in kinds if kind in described], (stack, described, kinds)
        assert set(described) == set(kinds), (stack, set(kinds) - set(described))


def test_the_reference_has_every_section_of_both_kinds_and_a_meaning_for_every_key():
    from gpuhosts.config import SECTIONS
    from gpuhosts.fleet import FLEET_SECTIONS
    from gpuhosts.schema_doc import KINDS, _rows, table
    from gpuhosts.training import TRAINER_SECTIONS

    for kind, sections in (("proxmox", SECTIONS + FLEET_SECTIONS), ("trainer", TRAINER_SECTIONS)):
        text = table(kind)
        missing = [s for s in sections if f"`gpuhosts:{s}`" not in text]
        assert missing == [], (kind, missing)
        for section, model, _ in KINDS[kind]:
            empty = [key for key, _default, meaning in _rows(model) if not meaning.strip()]
            assert empty == [], (kind, section, empty)


def test_the_readme_names_the_packages_make_installs():
    import re

    makefile = (PROJECT / "Makefile").read_text()
    install = re.search(r"apt-get install -y -qq ([^;]+);", makefile)
    packages = install[1].replace("\\", " ").split()
    readme = (PROJECT / "README.md").read_text().split("<!-- apt packages", 1)[1].split("with apt-get", 1)[0]
    assert re.findall(r"`([\w.+-]+)`", readme) == packages
