# Two entry points that bootstrap everything on a fresh machine:
#   make report   - the coverage report over the built-in operators (the main job)
#   make test     - the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= test,tvm,torch

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

.PHONY: report test bench clean
report: $(VENV)/.installed
	$(PY) -m texpr_ad coverage --format table -o reports/coverage --jobs 2
	if $(PY) -c "import tvm" 2>/dev/null; then \
		$(PY) -m texpr_ad coverage --relax --no-progress -o reports/coverage; fi

test: $(VENV)/.installed
	$(PY) -m pytest tests

bench: $(VENV)/.installed
	$(PY) -m bench

clean:
	rm -rf $(VENV) reports .texpr_cache
