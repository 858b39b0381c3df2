"""The DDTree authors' benchmark as a reference run: its checkout at a pinned commit with the project's declared
patch, the command that runs it, and the script that reads its figures.

The checkout is a unit of the container (`DDTreeCheckout`): git fetches exactly the commit, the patch is a file
beside it applied with `git apply` (checked first, so a patch that does not apply refuses with git's reason), and a
marker `<commit> patch:<sha256>` written last says the checkout is complete; a changed patch checks out again from
the commit. The run itself uses DDTree's own locked environment (a PythonEnv unit of the benchmark, from
locks/ddtree/: liranringel/ddtree's requirements.txt at c96427a185677bf4133ed865dd1626a5041aef9b less flash-attn,
ninja and matplotlib, which the patch makes it do without or which benchmark.py does not import, with accelerate,
which transformers needs for the patch's `device_map`), or, when the stack names one (`environmentOf`), the
environment of one of the benchmark's services.
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

from gpuhosts.benchmarks import BenchmarkConfig, DDTreeReference, ddtree_env
from gpuhosts.facts import Fact, desired, files_facts
from gpuhosts.hostside import ddtree_result
from gpuhosts.paths import SERVICE_ROOT
from gpuhosts.plans.python_env import in_container, plan_env, probe_in
from gpuhosts.render import HostFile, render
from gpuhosts.units import Unit

DDTREE_ROOT = f"{SERVICE_ROOT}/ddtree"
RESULT_SCRIPT = "/usr/local/lib/gpuhosts/ddtree-result.py"
MARKER = ".gpuhosts-checkout"


def _reference(bench: BenchmarkConfig) -> DDTreeReference:
    if bench.ddtree is None:
        raise ValueError(f"benchmark {bench.name} declares no ddtree reference run")
    return bench.ddtree


def ddtree_checkout(vmid: int, bench: BenchmarkConfig) -> str:
    """The checkout's directory in container `vmid`: one per benchmark and commit, so that two benchmarks with
    other patches never check each other's tree out, nor remove it."""
    return f"{DDTREE_ROOT}/{bench.name}/{_reference(bench).commit}"


def patch_path(vmid: int, bench: BenchmarkConfig) -> str:
    return f"{DDTREE_ROOT}/{bench.name}/{_reference(bench).commit}.patch"


def checkout_marker(reference: DDTreeReference, patch_text: str) -> str:
    return f"{reference.commit} patch:{hashlib.sha256(patch_text.encode()).hexdigest()}"


def plan_ddtree_checkout(vmid: int, bench: BenchmarkConfig, patch_text: str, needs: tuple[str, ...]) -> Unit:
    reference = _reference(bench)
    digest = hashlib.sha256(patch_text.encode()).hexdigest()
    if digest != reference.patch.sha256:
        # benchmark_problems says so for the stack; a plan given another text must not install it unreviewed.
        raise ValueError(f"{reference.patch.file} has sha256 {digest}, not the declared {reference.patch.sha256}")
    unit = f"ct{vmid}-ddtree-{bench.name}"
    checkout = ddtree_checkout(vmid, bench)
    patch = HostFile(patch_path(vmid, bench), patch_text)
    marker = checkout_marker(reference, patch_text)
    values = dict(unit=unit, vmid=vmid, bench=bench.name, repository=reference.repository, commit=reference.commit,
                  checkout=checkout, patch=patch, patch_name=reference.patch.file, marker=marker,
                  ddtree_root=DDTREE_ROOT, service_root=SERVICE_ROOT)
    facts = [*files_facts([patch]),
             Fact(f"ddtree checkout {checkout}",
                  f'cat "$root"{shlex.quote(checkout + "/" + MARKER)} || echo missing', marker)]
    return Unit(
        key=unit,
        kind="DDTreeCheckout",
        ensure=in_container(unit, vmid, render("ddtree_reference/checkout.sh.j2", **values)),
        teardown=in_container(unit, vmid, render("ddtree_reference/checkout-teardown.sh.j2", **values),
                              teardown=True),
        probe=probe_in(unit, vmid, facts),
        desired=desired(facts),
        needs=needs,
        files=(patch,),
        container=vmid,
        undoes=f"DDTree checkout {checkout} ({reference.repository} at {reference.commit}) removed from CT {vmid}",
    )


def ddtree_env_key(vmid: int, bench: BenchmarkConfig) -> str:
    return f"ct{vmid}-env-ddtree-{bench.name}"


def plan_ddtree_env(vmid: int, bench: BenchmarkConfig, needs: tuple[str, ...]) -> Unit | None:
    """DDTree's own environment in container `vmid`, installed as the engines' are; None when a service lends its
    environment (`environmentOf`)."""
    env = ddtree_env(bench)
    return None if env is None else plan_env(ddtree_env_key(vmid, bench), env, vmid, needs)


def ddtree_job_argv(bench: BenchmarkConfig, python: str, target_model_path: str, save_path: str,
                    prompts_path: str) -> list[str]:
    """benchmark.py's command line, one process (no torchrun: distributed.py `init` skips the process group without
    RANK); run with the checkout as working directory. Its flags are those of benchmark.py `main` at the commit with
    the patch's part (d), `--prompts` and `--thinking` (tests/test_ddtree_reference.py reads them from the patched
    file). Without a data set it answers the benchmark's prompts file in the benchmark's chat mode, as the
    services do."""
    reference = _reference(bench)
    source = (["--prompts", prompts_path] if reference.dataset is None else
              ["--dataset", reference.dataset]
              + (["--max-samples", str(reference.max_samples)] if reference.max_samples is not None else []))
    max_new_tokens = reference.max_new_tokens if reference.max_new_tokens is not None else bench.prompts.max_tokens
    return [python, "benchmark.py",
            "--model-name-or-path", target_model_path,
            "--draft-name-or-path", reference.drafter.path,
            *source,
            "--thinking", "on" if bench.thinking else "off",
            "--max-new-tokens", str(max_new_tokens),
            "--tree-budget", ",".join(str(b) for b in reference.tree_budgets),
            "--temperature", repr(float(reference.temperature)),
            "--save-path", save_path]


def render_ddtree_result_script() -> HostFile:
    """gpuhosts/hostside/ddtree_result.py as the container receives it: standard library only, so any python3 there
    (a service's environment or the system's) reads a run file."""
    return HostFile(RESULT_SCRIPT, render("ddtree_reference/ddtree-result.py.j2", path=RESULT_SCRIPT,
                                          source=Path(ddtree_result.__file__).read_text().rstrip("\n")), "0755")
