# The two commands a new machine needs: `make demo` and `make test`. Both build .venv themselves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/reasonstate demo

lint: $(STAMP)
	$(BIN)/ruff check reasonstate tests benchmarks examples
	$(BIN)/mypy --strict reasonstate

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/overhead_openai.py
	$(BIN)/python benchmarks/bridge.py

clean:
	rm -rf $(VENV) build dist *.egg-info
