"""The README's config reference is what the typed models say: regenerate it with
`python -m gpuhosts.schema_doc --write` when a field, default or description changes."""

from __future__ import annotations

from conftest import PROJECT
from gpuhosts.schema_doc import KINDS, rendered, table


def test_the_committed_config_reference_is_the_generated_one():
    readme = (PROJECT / "README.md").read_text()
    assert rendered(readme) == readme, "README.md's config reference is stale: python -m gpuhosts.schema_doc --write"


def test_every_field_of_every_section_is_in_it():
    for kind, sections in KINDS.items():
        text = table(kind)
        for section, model, _listed in sections:
            assert f"`gpuhosts:{section}`" in text
            for name, field in model.model_fields.items():
                assert f"`{field.alias or name}`" in text or f".{field.alias or name}`" in text, (kind, section, name)


def test_pulumi_yaml_declares_what_the_models_say_every_stack_has():
    import yaml

    from gpuhosts.schema_doc import project_config

    assert yaml.safe_load((PROJECT / "Pulumi.yaml").read_text())["config"] == project_config()


def test_the_readme_describes_the_kinds_of_units_in_the_order_the_plan_applies_them():
    import re

    from gpuhosts.schema_doc import ORDERED_STACKS, apply_order

    readme = (PROJECT / "README.md").read_text()
    for stack in ORDERED_STACKS:
        kinds = list(dict.fromkeys(re.findall(r"^\| \d+ \| `[^`]+` \| (\w+) \|", apply_order(stack), re.M)))
        # The prose that follows the stack's generated table describes each kind in bold, in its own order.
        after = readme.split(f"<!-- end of apply order: {stack} -->", 1)[1].split("\n#", 1)[0]
        heads = [line.split(" — ", 1)[0] for line in after.splitlines() if line.startswith("- **")]
        described = [kind for head in heads for kind in re.findall(r"\*\*(\w+)\*\*", head) if kind in kinds]
        assert described == [kind for kind in kinds if kind in described], (stack, described, kinds)
        assert set(described) == set(kinds), (stack, set(kinds) - set(described))
