# Two commands do all the set-up on a fresh clone:
#   make run    create .venv if missing, install, train (python main.py)
#   make test   the same set-up with the test and ray extras, then the test suite
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: run test lint format bench install install-test clean-shm clean

$(VENV)/bin/activate:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/activate
	$(PY) -m pip install --quiet -e .
	touch $@

# The test set-up installs the ray extra too, so CI runs the Ray backend's cluster tests.
$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/activate
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
