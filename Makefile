# Every target installs what it needs first; nothing is assumed to be on the machine but python3.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTHON ?= python3

.PHONY: install run test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

run: install
	$(VENV)/bin/fairbroker table1 --trials 2000 --seed 1

test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q

lint: install
	$(VENV)/bin/ruff check .

bench: install
	$(PY) -m benchmarks.bench_fill
	$(PY) -m benchmarks.ties_report
	$(PY) -m benchmarks.sim_claims
	$(PY) -m benchmarks.bench_sim

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
