# The two commands a newcomer needs: `make demo` and `make test`. Both create .venv when missing
# and (re)install only when pyproject.toml or the C decoder is newer than the last install (the
# editable install builds analyzers/ingest/_xplane_wire.c in place).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test test-fast lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml setup.py analyzers/ingest/_xplane_wire.c | $(BIN)/python
	@echo "==> installing recadvisor with TensorFlow (CPU), PostgreSQL driver and dev tools into $(VENV)"
	$(BIN)/python -m pip install --progress-bar off -e '.[tf,postgres,dev]'
	@$(BIN)/python -c "import analyzers.ingest._xplane_wire" 2>/dev/null || echo "warning: the C xplane decoder was not built (no C compiler?): large traces will be read ~13x slower" >&2
	touch $(STAMP)

install: $(STAMP)

demo: install
	bash scripts/demo.sh

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

test-fast: install
	$(BIN)/python -m pytest -m "not slow"

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache test-artifacts
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
