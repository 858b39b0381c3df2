# gpuhosts — the two everyday commands are `make plan` and `make test`.
# Works on a machine with only python3, pip and make: uv is bootstrapped into .tools/.
PYTHON ?= python3
STACK ?= kpro5
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: refresh-figures pulumi demo plan test test-full test-pulumi bench golden system-deps clean locks verify-engines verify-torchrun verify-ddtree verify-prepare-data gpu-trainer

# uv pinned by content (gpuhosts/uv-requirements.txt: every wheel's sha256), as gpuhosts installs it on hosts.
$(UV): gpuhosts/uv-requirements.txt
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check --require-hashes --only-binary :all: \
		-r gpuhosts/uv-requirements.txt

$(VENV)/.synced: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --python $(PYTHON)
	touch $@

# The Pulumi CLI and its Python language host built with `go` from tools/pulumi/go.mod (every module hash-pinned by
# its go.sum) into .tools/pulumi, the two Python shims of the sdk/v3 module and a link to uv beside them:
# export PATH="$PWD/.tools/pulumi:$PATH". Built once per machine; a changed pin or source builds again.
PULUMI_TOOLS := $(TOOLS)/pulumi
pulumi: $(UV)
	tools/pulumi/build.sh $(PULUMI_TOOLS) $(UV)

# The main job on a fresh machine: the real Pulumi CLI converges kpro5 onto a simulated Proxmox host over SSH on
# loopback (preview, up, stack output, up again, destroy), printed as the CLI prints it (tests/realengine/demo.py).
demo: pulumi $(VENV)/.synced system-deps
	PYTHONPATH=tests:. $(VENV)/bin/python -m realengine.demo

plan: $(VENV)/.synced
	$(VENV)/bin/gpuhosts plan $(STACK) --out build/plan/$(STACK)

# shellcheck and systemd-analyze validate what gpuhosts renders; sshd serves the simulated host over real SSH;
# chromium renders the training monitor's page headless; Debian's prometheus (promtool) and prometheus-alertmanager
# check the alert rules and carry an alert end to end. apt-get only runs where one of them is missing.
system-deps:
	@command -v shellcheck >/dev/null && command -v systemd-analyze >/dev/null && \
		test -x /usr/sbin/sshd && command -v ssh >/dev/null && command -v chromium >/dev/null && \
		command -v /usr/sbin/modprobe >/dev/null && command -v /usr/sbin/depmod >/dev/null && \
		command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v prometheus-alertmanager >/dev/null && \
		command -v pkill >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq shellcheck systemd openssh-server openssh-client chromium kmod \
			prometheus prometheus-alertmanager procps; }

# The quick tier, after every change: every unit kind by its plan and one converge on the simulated host; the
# scenario suites (faults, fidelity, hostile input, every drift case) are marked `full` (tests/conftest.py).
# Three workers on two cores: the converges wait on their scripts' processes and on SSH, so a third keeps both
# cores busy (196 s with two workers, 176 s with three, 191 s with four, on 2 cores).
test: $(VENV)/.synced system-deps
	$(VENV)/bin/python -m pytest -n 3 --dist loadfile -o addopts="" -m "not full and not pulumi"

# Everything: the quick tier first (a red quick tier stops there), then the scenario suites it leaves out, then the
# real-engine tier. CI runs it.
test-full: test
	$(VENV)/bin/python -m pytest -n 2 --dist loadfile -o addopts="" -m "full and not pulumi"
	$(MAKE) test-pulumi

# The real-engine tier: every lifecycle claim through the Pulumi CLI that `make pulumi` builds, against simulated
# hosts over SSH on loopback, the file backend in a temporary folder (tests/realengine); prints its figure lines.
test-pulumi: pulumi $(VENV)/.synced system-deps
	rm -rf build/pulumi-figures
	GPUHOSTS_REAL_ENGINE=required $(VENV)/bin/python -m pytest -n 2 --dist loadfile -o addopts="" -m pulumi tests/realengine
	PYTHONPATH=tests $(VENV)/bin/python -m realengine.figures

# `pulumi refresh` of 1, 4, 16 and 64 simulated hosts through the real CLI, each unit read alone and each host in
# one command: wall time, SSH commands per host and the provider's CPU seconds (tests/realengine/refresh_figures.py).
refresh-figures: pulumi $(VENV)/.synced system-deps
	PYTHONPATH=tests:. $(VENV)/bin/python -m realengine.refresh_figures

golden: $(VENV)/.synced
	GPUHOSTS_UPDATE_GOLDEN=1 $(VENV)/bin/python -m pytest tests/test_golden.py

# The locked closure (with hashes) of every environment the committed stacks install, and of the newest releases
# in gpuhosts/compat-rules.yaml, into locks/ (gpuhosts/lock_tool.py); needs PyPI. Commit the result.
locks: $(VENV)/.synced
	$(VENV)/bin/python -m gpuhosts.lock_tool --uv $(UV)

# Installs each locked engine environment into build/engines/ with a Python 3.12 (VERIFY_PYTHON) and feeds the
# rendered command lines to the engines' own parsers; rewrites tests/fixtures/engines/. Heavy: not part of `test`.
VERIFY_PYTHON ?= $(shell for p in $$(command -v python3.12) $$HOME/.pyenv/versions/3.12*/bin/python3.12; do "$$p" -c '' 2>/dev/null && echo "$$p" && break; done)
verify-engines: $(VENV)/.synced
	@test -n "$(VERIFY_PYTHON)" || { echo "verify-engines needs Python 3.12: set VERIFY_PYTHON=/path/to/python3.12"; exit 2; }
	$(VENV)/bin/python tests/verify_engines/run.py --python "$(VERIFY_PYTHON)" --uv $(UV)

# The trainer for real on one GPU (tests/gpu/trainer_run.py; docs/training-node.md, "The trainer on a GPU"): here,
# the trainer stack scaled and rendered into build/gpu-trainer with speculators' scripts (SPECULATORS_GIT: a clone of
# vllm-project/speculators) and the wheels of tests/gpu/trainer-wheels.txt into .whl/; then, on a machine with a GPU
# and torch, as root: python3 tests/gpu/trainer_run.py --bundle build/gpu-trainer --wheels .whl --out OUT.
# GPU_SCALE=tests/gpu/trainer-scale-gpu8.yaml renders the eight-GPU node instead (the stack's split kept).
SPECULATORS_GIT ?= ../speculators/.git
GPU_SCALE ?= tests/gpu/trainer-scale.yaml
gpu-trainer: $(VENV)/.synced
	$(VENV)/bin/python tests/gpu/trainer_bundle.py --speculators "$(SPECULATORS_GIT)" --scale $(GPU_SCALE) --out build/gpu-trainer
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .whl -r tests/gpu/trainer-wheels.txt
	@echo "on the GPU machine: python3 tests/gpu/trainer_run.py --bundle build/gpu-trainer --wheels .whl --out OUT"

# speculators' own prepare_data.py (the trainer stack's release, from its committed lock, on the CPU) over the
# converted fixture rows; rewrites gpuhosts/measured/, the bytes per token and sample lengths the plan derives the
# data set's size and its share of over-long samples from. Heavy: not part of `test`.
verify-prepare-data: $(VENV)/.synced
	@test -n "$(VERIFY_PYTHON)" || { echo "verify-prepare-data needs Python 3.12: set VERIFY_PYTHON=/path/to/python3.12"; exit 2; }
	$(VENV)/bin/python tests/verify_prepare_data/run.py --python "$(VERIFY_PYTHON)" --uv $(UV)

# DDTree's locked environment (locks/ddtree/) into build/ddtree/, and the pinned DDTree tree with and without
# stacks/patches/ddtree-gdn-hybrid.patch: DFlash and DDTree against greedy decode on a random-weight GDN-hybrid
# target in float32 on CPU (tests/verify_ddtree/run.py). Heavy (torch): not part of `test`.
verify-ddtree: $(VENV)/.synced
	@test -n "$(VERIFY_PYTHON)" || { echo "verify-ddtree needs Python 3.12: set VERIFY_PYTHON=/path/to/python3.12"; exit 2; }
	$(VENV)/bin/python tests/verify_ddtree/run.py --python "$(VERIFY_PYTHON)" --uv $(UV)


# The planned multi-node trainer command line through torchrun's own parser, in speculators' locked environment
# that verify-engines installs; rewrites tests/fixtures/torchrun/.
verify-torchrun: $(VENV)/.synced
	$(VENV)/bin/python tests/verify_torchrun/check_torchrun.py

bench: $(VENV)/.synced
	$(VENV)/bin/python -m gpuhosts.bench

clean:
	rm -rf $(VENV) $(TOOLS) build
