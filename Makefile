# The two commands a new machine needs: `make demo` and `make test`. Both build .venv themselves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean fuzz docs

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

# the hypothesis properties of tests/test_fuzz.py with 20x their default 1,000 examples each
FUZZ_EXAMPLES ?= 20000
fuzz: $(STAMP)
	REASONSTATE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q tests/test_fuzz.py

# every benchmark runs even when an earlier one misses its target; the target fails at the end if any did
bench: $(STAMP)
	@status=0; \
	$(BIN)/python benchmarks/overhead.py || status=1; \
	$(BIN)/python benchmarks/overhead_openai.py || status=1; \
	$(BIN)/python benchmarks/overhead_gemini.py || status=1; \
	$(BIN)/python benchmarks/bridge.py || status=1; \
	$(BIN)/python benchmarks/export.py || status=1; \
	exit $$status

# the documentation site into site/; --strict: a broken link or a missing API reference fails the build
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build dist site *.egg-info
