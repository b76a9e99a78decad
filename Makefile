# Two commands do all the set-up: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
DEMO_DIR ?=  # empty: a new private temp directory (mkdtemp, mode 0700)

.PHONY: setup demo test fuzz test-airflow-deploy test-image test-multinode image lint fmt bench clean

setup:
	@./scripts/setup.sh

demo: setup
	@$(PY) -m dask_pfs.demo $(if $(strip $(DEMO_DIR)),--dir $(DEMO_DIR))

test: setup
	@./scripts/ensure-tools.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	./scripts/test-native.sh
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

# The differential oracle (tests/test_oracle.py: pfs cp/sync/scan against cp -a, rsync -aHAXS --delete and an lstat
# walk on Hypothesis-generated trees) run long: random examples (PFS_ORACLE_SCALE=40 times make test's), shrinking on.
# `make test` runs the same tests derandomized with a few examples each.
fuzz: setup
	@./scripts/ensure-tools.sh
	HYPOTHESIS_PROFILE=fuzz $(VENV)/bin/python -m pytest -q -p no:timeout tests/test_oracle.py tests/test_fidelity.py $(PYTEST_ARGS)

# The container image the Helm chart runs by default (charts/pfs), built with podman: docs/deploy.md.
image:
	@./scripts/build-image.sh

# The image run as the chart runs it (tests/test_image.py, marker `image`): scheduler, workers and the scan Job
# as podman containers; CI runs it after `make test` (.ci/run).
test-image: setup image
	$(VENV)/bin/python -m pytest -q -m image tests/test_image.py $(PYTEST_ARGS)

# The Airflow deployment test (tests/airflow_deploy/: PostgreSQL, scheduler, triggerer, dag-processor, api-server;
# ~5 min on 2 idle cores), kept out of `make test` for its time; .ci/run runs both.
test-airflow-deploy: setup
	$(VENV)/bin/python -m pytest -q -m airflow_deploy tests/airflow_deploy $(PYTEST_ARGS)

# pfs across three client hosts (tests/test_multinode.py, marker `multinode`: network namespaces, each with its own
# glusterfs mount of the ../shared/nas volume; docs/multinode.md): installs what it needs, brings the NAS harness
# (if not up) and the hosts up, runs the tests, brings them down, on failure too. Root only; ~5 min.
test-multinode: setup
	./scripts/test-multinode.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

fmt: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The benchmark report on the ../shared/nas harness (hours; BENCH_ARGS=--quick for a smoke run): benchmarks/README.md
bench: setup
	$(PY) benchmarks/report.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
