"""DrafterConvert: the starting drafter as a speculators checkpoint, its config.json checked against the stack first.

z-lab's checkpoint is not a speculators one: train.py --from-pretrained loads only what `speculators convert` (or,
in 0.7.x, its convert_model) made of it, which keeps z-lab's layer_types, sliding_window and mask token. The
conversion writes into `<dir>.part` and renames it when complete; its marker names the drafter and the
speculators requirement, so either changing converts again.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuhosts.engines import speculators as speculators_driver
from gpuhosts.envspec import EnvSpec
from gpuhosts.facts import Fact, content_fact, desired, files_facts, render_probe
from gpuhosts.hostside import drafter_config
from gpuhosts.paths import LIB_DIR
from gpuhosts.render import HostFile, render
from gpuhosts.training import LayerIds, TrainerStack, declared_drafter
from gpuhosts.units import Unit

KEY = "drafter-convert"
DRAFTER_CHECK_SCRIPT = f"{LIB_DIR}/check-drafter-config.py"
# The sha256 of the converted config.json as the conversion wrote it, beside it.
CONFIG_RECORD = ".gpuhosts-convert-config"
AS_CONVERTED = "as converted"


def converted_config_fact(output: str) -> Fact:
    """The converted config.json against the digest its conversion recorded: the plan cannot know the file (the
    converter derives it from the downloaded config), so an edit by hand (sliding_window 2048 → 4096) shows as a
    difference from the record, naming both digests."""
    config, record = shlex.quote(f"{output}/config.json"), shlex.quote(f"{output}/{CONFIG_RECORD}")
    probe = (f'if [ ! -f "$root"{config} ]; then echo missing; elif [ ! -f "$root"{record} ]; then echo "no record"; '
             f'else found="$(sha256sum <"$root"{config} | cut -c1-16)"; recorded="$(cut -c1-16 "$root"{record})"; '
             f'if [ "$found" = "$recorded" ]; then echo {shlex.quote(AS_CONVERTED)}; '
             f'else echo "edited since the conversion (sha256 $found, converted $recorded)"; fi; fi')
    return Fact(f"converted config {output}/config.json", probe, AS_CONVERTED)


@dataclass(frozen=True)
class ConvertedDrafter:
    unit: Unit
    dir: str
    invocation: speculators_driver.Invocation
    # The stack's values the drafter's config.json is checked against.
    checks: dict[str, Any]


def converted_dir(stack: TrainerStack) -> str:
    return f"{stack.model_dir(stack.training.drafter)}.speculators"


def plan_drafter_convert(stack: TrainerStack, ids: LayerIds, speculators: EnvSpec,
                         needs: tuple[str, ...]) -> ConvertedDrafter:
    training = stack.training
    version = training.speculators.version
    verifier_dir, drafter_dir = stack.model_dir(training.verifier), stack.model_dir(training.drafter)
    output = converted_dir(stack)
    part_dir = f"{output}.part"
    convert = speculators_driver.convert(version, speculators.venv, drafter_dir, verifier_dir, part_dir)
    check_script = HostFile(DRAFTER_CHECK_SCRIPT, render(
        "drafter_convert/check-drafter-config.py.j2", path=DRAFTER_CHECK_SCRIPT,
        source=Path(drafter_config.__file__).read_text().rstrip("\n")), "0755")
    declared = declared_drafter(training, ids)
    marker = f"{training.drafter.repo}@{training.drafter.revision} {speculators.requirement}"
    facts = [*files_facts([check_script]),
             Fact(f"converted {output}", f'cat "$root"{shlex.quote(output + "/.gpuhosts-convert")} || echo missing',
                  marker), converted_config_fact(output), content_fact(output)]
    unit = Unit(
        key=KEY, kind="DrafterConvert",
        ensure=render("drafter_convert/drafter-convert.sh.j2", unit=KEY, drafter_repo=training.drafter.repo,
                      drafter_dir=drafter_dir, output=output, part=part_dir, marker=marker,
                      program=convert.program, version=version, python=speculators.interpreter,
                      config_record=CONFIG_RECORD,
                      check_script=DRAFTER_CHECK_SCRIPT, declared=declared, files=[check_script],
                      needs=[f"{drafter_dir}/.gpuhosts-download", f"{verifier_dir}/.gpuhosts-download",
                             convert.command[0]],
                      environment=convert.environment, command=list(convert.command), argv=list(convert.argv)),
        teardown=render("drafter_convert/drafter-convert-teardown.sh.j2", unit=KEY, output=output,
                        part=part_dir, remove=[DRAFTER_CHECK_SCRIPT], lib_dir=LIB_DIR,
                        delete=training.drafter.delete_on_destroy),
        probe=render_probe(KEY, facts, prelude=render("common/content.sh.j2")), desired=desired(facts), needs=needs,
        files=(check_script,), content=(output,),
        undoes=f"check script {DRAFTER_CHECK_SCRIPT} removed; converted drafter {output} "
        + ("deleted (drafter.deleteOnDestroy)" if training.drafter.delete_on_destroy else "kept"))
    return ConvertedDrafter(unit=unit, dir=output, invocation=convert, checks=declared)
