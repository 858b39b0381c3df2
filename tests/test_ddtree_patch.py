"""stacks/patches/ddtree-gdn-hybrid.patch applies, with `git apply` as the checkout unit runs it, to the files of
liranringel/ddtree at the pinned commit (tests/fixtures/ddtree/upstream-c96427a, copied from that commit), and the
tree it makes has the linear-attention verify in both generate functions. The proof that the result is lossless
runs in `make verify-ddtree` (tests/verify_ddtree/)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = ROOT / "tests/fixtures/ddtree/upstream-c96427a"
PATCH = ROOT / "stacks/patches/ddtree-gdn-hybrid.patch"


@pytest.fixture
def patched(tmp_path):
    tree = tmp_path / "ddtree"
    shutil.copytree(UPSTREAM, tree)
    subprocess.run(["git", "init", "--quiet"], cwd=tree, check=True)
    done = subprocess.run(["git", "apply", str(PATCH)], cwd=tree, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return tree


def test_the_stack_pins_the_commit_the_fixture_was_copied_from():
    assert "c96427a185677bf4133ed865dd1626a5041aef9b" in (ROOT / "stacks/Pulumi.kpro5.yaml").read_text()


@pytest.mark.parametrize("module, calls", [
    ("ddtree.py", ["new_target_cache(target)", "verifying(linear_verify, visibility_cpu)",
                   "linear_verify.commit(past_key_values_target, accepted_indices)"]),
    ("dflash.py", ["new_target_cache(target)", "verifying(linear_verify, block_chain)",
                   "linear_verify.commit(past_key_values_target, list(range(acceptance_length + 1)))"]),
])
def test_the_patched_generate_functions_verify_linear_attention_per_path_and_commit_the_accepted_one(
        patched, module, calls):
    text = (patched / module).read_text()
    for call in calls:
        assert call in text
    # No crop of the whole target cache is left: a linear-attention layer refuses it, and would keep the rejected
    # tokens in its recurrent state if it did not.
    assert "past_key_values_target.crop(" not in text
    assert "past_key_values.crop(past_length + len(keep_current_indices))\n        return\n\n    raise" not in text


def test_the_unpatched_tree_crops_the_whole_cache_which_is_what_the_patch_replaces():
    assert "past_key_values_target.crop(start)" in (UPSTREAM / "dflash.py").read_text()
    assert "past_key_values.crop(past_length" in (UPSTREAM / "ddtree.py").read_text()


def test_the_patch_adds_the_tree_aware_gated_delta_net_module(patched):
    text = (patched / "model/gdn_tree.py").read_text()
    assert "class LinearAttentionVerify" in text and "def commit(" in text
    compile(text, "gdn_tree.py", "exec")
