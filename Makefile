# gpuhosts — the two everyday commands are `make plan` and `make test`.
# Works on a machine with only python3, pip and make: uv is bootstrapped into .tools/.
PYTHON ?= python3
STACK ?= kpro5
UV_VERSION := 0.13.9
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: plan test bench golden system-deps clean lifecycle

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(VENV)/.synced: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --python $(PYTHON)
	touch $@

plan: $(VENV)/.synced
	$(VENV)/bin/gpuhosts plan $(STACK) --out build/plan/$(STACK)

# shellcheck and systemd-analyze validate what gpuhosts renders; sshd serves the simulated host over real SSH;
# chromium renders the training monitor's page headless. apt-get only runs where one of them is missing.
system-deps:
	@command -v shellcheck >/dev/null && command -v systemd-analyze >/dev/null && \
		test -x /usr/sbin/sshd && command -v ssh >/dev/null && command -v chromium >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq shellcheck systemd openssh-server openssh-client chromium; }

test: $(VENV)/.synced system-deps
	$(VENV)/bin/python -m pytest -n 2 --dist loadfile -o addopts=""

golden: $(VENV)/.synced
	GPUHOSTS_UPDATE_GOLDEN=1 $(VENV)/bin/python -m pytest tests/test_golden.py

# Lifecycle, faults, renames, drift, refresh and parallelism on the simulated hosts over SSH; prints the figures.
lifecycle: $(VENV)/.synced system-deps
	PYTHONPATH=tests:. $(VENV)/bin/python tests/lifecycle_figures.py

bench: $(VENV)/.synced
	$(VENV)/bin/python -m gpuhosts.bench

clean:
	rm -rf $(VENV) $(TOOLS) build
