# Two commands do all the set-up on a fresh clone:
#   make run    create .venv if missing, install, train (python main.py)
#   make test   the same set-up with the test and ray extras, then the test suite
# The first Python >= 3.13 found: python3.14 or python3.13 on PATH, else the newest under
# pyenv (whose shims exist but fail for a version not selected). PYTHON=... overrides.
PYTHON ?= $(shell for p in python3.14 python3.13 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[3-9]*/bin/python3 2>/dev/null | sort -rV); do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 13))' >/dev/null 2>&1 && { echo $$p; break; }; done)
NO_PYTHON := Python >= 3.13 is required and none was found (python3.13, python3.14, pyenv); install one (e.g. pyenv install 3.13) or run make PYTHON=/path/to/python3.13
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: run test lint format bench install install-test clean-shm clean

$(VENV)/bin/activate:
	@test -n "$(PYTHON)" || { echo "$(NO_PYTHON)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel

# A .venv made with an older Python (before the move to 3.13) is refused in one line.
OLD_VENV = { $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 13))' || { \
	echo "$(VENV) was made with $$($(PY) -V 2>&1), the project needs Python >= 3.13: run make clean, then make again" >&2; exit 1; }; }

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/activate
	@$(OLD_VENV)
	$(PY) -m pip install --quiet -e .
	touch $@

# The test set-up installs the ray extra too, so CI runs the Ray backend's cluster tests.
$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/activate
	@$(OLD_VENV)
	$(PY) -m pip install --quiet -e ".[test,ray]"
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

run: install
	$(PY) main.py $(ARGS)

# Lint and format are checked before the tests, so CI holds them too.
lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install-test
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# One pytest worker per core this process may use (-n auto, see tests/conftest.py). Each
# test module runs whole on one worker (loadfile): a module's costly fixtures (a Ray
# cluster, a training run, a compiled learner) are built once, not once per worker.
test: lint
	$(PY) -m pytest -q -n auto --dist loadfile --durations=15

bench: install
	$(PY) main.py bench $(ARGS)

# Remove shared-memory segments left by runs whose learner is gone.
clean-shm: install
	$(PY) -c "from pipeline.transport.segments import remove_stale_segments as r; print('\n'.join(r()) or 'none')"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
