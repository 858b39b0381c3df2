"""One name per unit kind: a unit plan (gpuhosts/plans/NAME.py) renders templates only from its own folder
(templates/NAME/) and the shared one (templates/common/), and every template folder but common/ is a plan's. A
newcomer who knows the plan finds its scripts in one folder."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLANS = sorted(p for p in (ROOT / "gpuhosts" / "plans").glob("*.py") if p.name != "__init__.py")
TEMPLATES = ROOT / "templates"
TEMPLATE_NAME = re.compile(r"^(?P<folder>[a-z_]+)/[A-Za-z0-9_.-]+\.j2$")
SHARED = "common"


def folders_rendered(source: str) -> set[str]:
    """The template folders a module names (every string constant shaped as FOLDER/FILE.j2)."""
    return {m["folder"] for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            for m in [TEMPLATE_NAME.match(node.value)] if m}


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.stem)
def test_a_plan_renders_only_its_own_folder_and_the_shared_one(plan):
    strays = folders_rendered(plan.read_text()) - {plan.stem, SHARED}
    assert not strays, (f"gpuhosts/plans/{plan.name} renders templates of {sorted(strays)}: move them to "
                        f"templates/{plan.stem}/ (or to templates/{SHARED}/ when several plans render them)")


def test_every_template_folder_is_a_plans():
    folders = {p.name for p in TEMPLATES.iterdir() if p.is_dir()}
    assert folders - {p.stem for p in PLANS} - {SHARED} == set()


def test_the_check_sees_a_stray_folder():
    assert folders_rendered('render("training_node/unit.sh.j2", x=1)\nother = "common/lib.sh.j2"\n') == \
        {"training_node", "common"}


INCLUDE = re.compile(r"""{%-?\s*(?:include|import|from)\s+["'](?P<folder>[a-z_]+)/""")


@pytest.mark.parametrize("folder", sorted(p.name for p in TEMPLATES.iterdir() if p.is_dir() and p.name != SHARED))
def test_a_plans_templates_include_only_their_own_folder_and_the_shared_one(folder):
    strays = {f"{path.name}: {m['folder']}/" for path in sorted((TEMPLATES / folder).glob("*.j2"))
              for m in INCLUDE.finditer(path.read_text()) if m["folder"] not in (folder, SHARED)}
    assert not strays, f"templates/{folder}/ includes another plan's templates: {sorted(strays)}"
