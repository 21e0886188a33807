# The two commands a new machine needs: `make demo` and `make test`. Both build .venv themselves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint lint-quick bench clean fuzz docs dist-check screenshots

# make test, lint, docs, ...: the whole dev set (linters, docs, every extra), once per change of pyproject.toml
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# make demo: only what the demo drives (the `demo` extra: the vendor SDKs and the tokenizers), with pip's
# progress shown; in its own stamp, so a later make test still installs the dev set. A venv that already
# has the dev set has the demo's too.
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; exit 0; fi; \
	set -e; test -x $(BIN)/python || $(PY) -m venv $(VENV); \
	echo "make demo: installing reasonstate[demo] into $(VENV) (the vendor SDKs and tokenizers, no dev tools)"; \
	$(BIN)/pip install --progress-bar on -e '.[demo]'; \
	touch $@

demo: $(DEMO_STAMP)
	$(BIN)/reasonstate demo

lint: lint-quick
	$(BIN)/mypy --strict reasonstate

# the linters that take seconds: make lint and make test run them first
lint-quick: $(STAMP)
	$(BIN)/ruff check reasonstate tests benchmarks examples
	$(BIN)/ruff format --check reasonstate tests benchmarks examples
	$(BIN)/lint-imports

# the quick linters, then the suite on every core (pytest-xdist; an idle worker steals the tests a busy one
# has queued), the ten slowest tests listed at the end; hypothesis properties at 100 examples each
# (tests/conftest.py). mypy --strict runs beside the suite, not before it: on a fresh clone it spends about
# a minute on one core (it reads the vendor SDKs' types) while the other core would sit idle; its output is
# printed after the suite's, and make test fails when either fails.
test: lint-quick
	@log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	$(BIN)/mypy --strict reasonstate >"$$log" 2>&1 & typing=$$!; \
	$(BIN)/pytest -n auto --dist worksteal --durations=10; tests=$$?; \
	wait $$typing; typed=$$?; echo "$(BIN)/mypy --strict reasonstate"; cat "$$log"; \
	test $$tests -eq 0 && test $$typed -eq 0

# The wheel and the sdist, built from this tree, install and import in clean virtual environments without
# any extra or dev dependency: the package data (py.typed, the bundled templates) is in them, the console
# script runs, and the version is the one in pyproject.toml. Everything happens in a temporary directory.
DIST_IMPORT := import pathlib, reasonstate, reasonstate.testing; \
  from reasonstate.tokens.templates import TEMPLATE_NAMES, template_path; \
  root = pathlib.Path(reasonstate.__file__).parent; \
  assert 'site-packages' in str(root), root; \
  assert (root / 'py.typed').is_file() and all(template_path(n).is_file() for n in TEMPLATE_NAMES); \
  print(reasonstate.__version__)
dist-check: $(STAMP)
	@set -eu; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	version=$$($(BIN)/python -c "from importlib.metadata import version; print(version('reasonstate'))"); \
	$(BIN)/python -m build --outdir "$$tmp/dist" . >"$$tmp/build.log" 2>&1 || { cat "$$tmp/build.log"; exit 1; }; \
	for kind in whl tar.gz; do \
		$(BIN)/python -m venv "$$tmp/$$kind"; \
		"$$tmp/$$kind/bin/pip" install -q --disable-pip-version-check "$$tmp"/dist/reasonstate-*.$$kind; \
		got=$$(cd "$$tmp" && "$$tmp/$$kind/bin/python" -c "$(DIST_IMPORT)"); \
		test "$$got" = "$$version" || { echo "dist-check: $$kind imports as version '$$got', expected $$version"; exit 1; }; \
		test "$$("$$tmp/$$kind/bin/reasonstate" --version)" = "reasonstate $$version"; \
		echo "dist-check: $$(basename "$$tmp"/dist/reasonstate-*.$$kind) installs and imports (reasonstate $$got)"; \
	done

# the hypothesis properties of tests/test_fuzz.py with 200x the 100 examples each of make test (the
# "fuzz" profile of tests/conftest.py), on every core
FUZZ_EXAMPLES ?= 20000
fuzz: $(STAMP)
	REASONSTATE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -n auto --dist worksteal tests/test_fuzz.py

# every benchmark runs even when an earlier one misses its target; the target fails at the end if any did
bench: $(STAMP)
	@status=0; \
	$(BIN)/python benchmarks/overhead.py || status=1; \
	$(BIN)/python benchmarks/overhead_openai.py || status=1; \
	$(BIN)/python benchmarks/overhead_gemini.py || status=1; \
	$(BIN)/python benchmarks/bridge.py || status=1; \
	$(BIN)/python benchmarks/token_session.py || status=1; \
	$(BIN)/python benchmarks/export.py || status=1; \
	$(BIN)/python benchmarks/guard.py || status=1; \
	$(BIN)/python benchmarks/cache_causes.py || status=1; \
	$(BIN)/python benchmarks/agent_cache.py || status=1; \
	$(BIN)/python benchmarks/long_session.py || status=1; \
	$(BIN)/python benchmarks/rooms.py || status=1; \
	$(BIN)/python benchmarks/fresh_session.py || status=1; \
	$(BIN)/python benchmarks/store.py || status=1; \
	exit $$status

# the documentation site into site/; --strict: a broken link or a missing API reference fails the build.
# First the benchmark charts (docs/images/*.svg, small quick runs: benchmarks/charts.py)
docs: $(STAMP)
	$(BIN)/python benchmarks/charts.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# docs/images/report.png and docs-chart.png: the headless-Chromium test's screenshots of the HTML report and
# of the charts' docs page, kept (needs chromium)
screenshots: $(STAMP)
	REASONSTATE_SCREENSHOTS=docs/images REASONSTATE_REQUIRE_SERVICES=1 $(BIN)/pytest -q \
		tests/test_report_html.py -k chromium

clean:
	rm -rf $(VENV) build dist site *.egg-info
