# Project Signal. `make demo` runs the local demo; `make test` runs the whole test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One line per stage, the raw output in .cache/logs/<stage>.log (named on failure): hack/stage.py.
STAGE := $(PYTHON) hack/stage.py

# Lanes (tests/lanes.py; README "Tests"): test-fast = lint + unit lane (no API server, a few
# minutes); test-integration = the API-server lane; test-system = the slow lane (real nodes,
# images, crash at every write, chaos, demos). `make test` runs every lane (CI's command).
.PHONY: demo test test-fast test-integration test-system lint deps system-packages python signal-static image-base kplane argo coredns seaweedfs prometheus helm kube-score release crds images mpi-operator bench

# make demo: the system packages, then two lanes at once (hack/buildlanes.py: the first failure stops
# both): the Python environment and the images (mostly downloads and disk) beside the images'
# Debian base (downloads; the images wait for it on their lock) and the Go builds the demo runs
# (CPU bound; one at a time, as each already uses every core). Argo: only what the
# cluster runs (ARGO_TOOLS), not the argo CLI the tests lint with. The demo then finds every
# build current by its content key. DEMO_ARGS: signalctl demo's own flags (e.g. --exit-after 0).
DEMO_LANES := "python images" "image-base argo mpi-operator kplane coredns signal-static"
demo: system-packages
	@ARGO_TOOLS="workflow-controller argoexec" $(PYTHON) hack/buildlanes.py $(DEMO_LANES)
	$(BIN)/signalctl demo $(DEMO_ARGS)

test: deps kplane argo coredns seaweedfs prometheus helm kube-score lint
	$(BIN)/python -m pytest

test-fast: deps lint
	$(BIN)/python -m pytest -m unit tests/unit

test-integration: deps kplane argo coredns seaweedfs prometheus helm kube-score
	$(BIN)/python -m pytest -m integration

test-system: deps kplane argo coredns
	$(BIN)/python -m pytest -m system

lint: deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# A virtual environment belongs to the path it was made at: its scripts' interpreter lines and
# the editable install name that path. A checkout copied or moved elsewhere (CI runs a copy)
# gets a fresh one instead of running the old path's scripts and code.
VENV_STAMP := $(VENV)/.installed-$(shell printf '%s' "$(CURDIR)" | sha256sum | cut -c1-16)

deps: system-packages python

system-packages:
	@$(STAGE) system-packages "the Debian packages the project needs (only those missing)" hack/install-system-deps.sh

python: $(VENV_STAMP)
	@:

$(VENV_STAMP): pyproject.toml
	@if [ -d $(VENV) ] && [ "$$(cat $(VENV)/.path 2>/dev/null)" != "$(CURDIR)" ]; then \
		echo "$(VENV) was made at $$(cat $(VENV)/.path 2>/dev/null || echo 'another path'); making it anew here"; \
		rm -rf $(VENV); \
	fi
	@$(STAGE) python "the Python environment $(VENV) (the project and its pinned tools)" sh -c \
		'$(PYTHON) -m venv $(VENV) && $(BIN)/pip install --quiet --upgrade pip==25.3 && $(BIN)/pip install --quiet -e ".[dev]"'
	@printf '%s\n' "$(CURDIR)" > $(VENV)/.path
	@touch $@

kplane:
	@$(STAGE) kplane "Kubernetes components (etcd, kube-apiserver, kubelet, ...) from the Go modules, cached by content" localcluster/kplane/build.sh

# CoreDNS with the kubernetes plugin, for the local cluster's real nodes.
coredns:
	@$(STAGE) coredns "CoreDNS for real nodes, cached by content" localcluster/coredns/build.sh

# SeaweedFS (weed: a real S3 API for the artifact store's tests): local test infrastructure only.
seaweedfs:
	@$(STAGE) seaweedfs "SeaweedFS (a real S3 API for the artifact store's tests), cached by content" localcluster/seaweedfs/build.sh

# Prometheus and promtool (the observability pack's rules and scrape tests): local test
# infrastructure only.
prometheus:
	@$(STAGE) prometheus "Prometheus and promtool (the observability pack's tests), cached by content" localcluster/prometheus/build.sh

# Helm v4 (helm.sh/helm/v4, pinned in localcluster/helm/go.mod): tests lint, render, install,
# upgrade and uninstall charts/signal with it; `make release` packages the chart. Tooling only.
helm:
	@$(STAGE) helm "Helm v4 (the chart's tests, make release), cached by content" localcluster/helm/build.sh

# kube-score (github.com/zegl/kube-score, pinned in localcluster/kube-score/go.mod): a test scores
# the rendered bundle with it (docs/operator-guide.md, "What kube-score reports"). Tooling only.
kube-score:
	@$(STAGE) kube-score "kube-score (scores the rendered bundle), cached by content" localcluster/kube-score/build.sh

# The release bundle (docs/upgrade.md): dist/install.yaml (the CRDs and deploy/, images pinned
# by the digests of the images built into the local image index) and dist/signal-<version>.tgz
# (the chart, same digests). Fails, saying what to build, unless all four images are built from
# the current sources; RELEASE_ARGS=--unpinned writes tag-only manifests (never for production).
release: deps kplane helm
	$(BIN)/python -m localcluster.release $(RELEASE_ARGS)

# Argo Workflows v4.0.5 (workflow-controller, argoexec, argo CLI): local test infrastructure only.
# ARGO_TOOLS (words) builds only those (make demo: the two the cluster runs); default all three.
ARGO_TOOLS ?=
argo:
	@$(STAGE) argo "Argo Workflows ($(or $(ARGO_TOOLS),workflow-controller argoexec argo)), cached by content" localcluster/argo/build.sh $(ARGO_TOOLS)

# Benchmarks against floors measured in the same run (bench/floors.py): each prints, per goal of
# issue 15, the floor, Signal's figure, their ratio and the goal, and its growth from 1/10 of its
# size. Default sizes fit a two-core machine; BENCH_ARGS_<NAME> passes the full sizes (README).
bench: deps kplane argo coredns
	$(BIN)/python bench/admission.py $(BENCH_ARGS_ADMISSION)
	$(BIN)/python bench/ledger.py $(BENCH_ARGS_LEDGER)
	$(BIN)/python bench/check_overhead.py $(BENCH_ARGS_CHECKS)
	$(BIN)/python bench/adapter_pods.py $(BENCH_ARGS_ADAPTER)
	$(BIN)/python bench/portal.py $(BENCH_ARGS_PORTAL)
	flock /tmp/signal-realnode.lock $(BIN)/python bench/realnode_checks.py $(BENCH_ARGS_REALNODE)
	$(BIN)/python bench/run_end.py $(BENCH_ARGS_RUN_END)

crds: deps
	$(BIN)/python -m shared.crdgen crds

# The real Kubeflow MPI operator v0.8.0 from $SIGNAL_MPI_OPERATOR_SRC (local cluster only).
mpi-operator:
	@$(STAGE) mpi-operator "the Kubeflow MPI operator, cached by content" localcluster/mpi-operator/build.sh

# The real nodes' static program (pause, namespace holder, test tool), cached by content.
signal-static:
	@$(STAGE) signal-static "the real nodes' static program (pause, namespace holder), cached by content" localcluster/realnode/static/build.sh

# The images' Debian base alone (mmdebstrap), with the system Python: localcluster.images needs
# only the standard library for it, so make demo makes it while it makes the virtual environment.
image-base:
	@$(STAGE) image-base "the images' Debian base (mmdebstrap: Debian's packages), cached by content" $(PYTHON) -m localcluster.images --base

# Container images without Docker (buildah on an mmdebstrap Debian base), cached by content:
# OCI archives and their digests in .cache/images/ (index.json). The system packages (buildah,
# mmdebstrap) come from `make deps`. A binary image (argoexec, workflow-controller,
# mpi-operator) takes its Go build from the cache, waits for one in progress (the build
# scripts' locks) or builds it: make demo runs this beside the Go builds (hack/buildlanes.py).
images: python
	@$(STAGE) images "the images (buildah on an mmdebstrap Debian base), cached by content" $(BIN)/python -m localcluster.images
