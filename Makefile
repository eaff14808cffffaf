# Two entry points that bootstrap everything on a fresh machine:
#   make report   - the coverage report over the built-in operators (the main job)
#   make test     - the test suite
#   make docs     - the documentation site (MkDocs, warnings are errors) -> site/
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= test,tvm,torch,jax,docs,tbb

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

.PHONY: report test bench docs clean
report: $(VENV)/.installed
	$(PY) -m texpr_ad coverage --format table -o reports/coverage --jobs 2
	if $(PY) -c "import tvm" 2>/dev/null; then \
		$(PY) -m texpr_ad coverage --relax --no-progress -o reports/coverage; fi

# pytest-xdist workers (extra `test`): a serial run keeps one of the 2 cores busy (Numba compiles
# one kernel at a time); TEST_JOBS=0 runs in one process
TEST_JOBS ?= 2
test: $(VENV)/.installed
	$(PY) -m pytest -n $(TEST_JOBS) --dist worksteal tests

bench: $(VENV)/.installed
	$(PY) -m bench

# the docs extra is installed here too when EXTRAS left it out; the build runs the docs' code
docs: $(VENV)/.installed
	$(PY) -c "import mkdocs, mkdocstrings, material" 2>/dev/null || $(PY) -m pip install -q -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) reports .texpr_cache site
