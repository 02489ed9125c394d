# gpuconform: GPU-scheduling conformance for Kubernetes.
# `make test` is what CI runs (.ci/run); `make e2e` is the main job on the local offline cluster.

SHELL := /usr/bin/env bash -o pipefail
GO ?= go
# Every build is static (the binaries run FROM scratch in the images) and shares one build cache.
export CGO_ENABLED := 0
# -trimpath for every go command here: the local cluster builds the project's own binaries (the tools image,
# the pod network agent, the runtime wrapper) with it, and the go command reuses a compiled package only
# under the same flags, so `make build`, vet and the unit tests compile client-go once for all of them.
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)
ARTIFACTS ?= $(CURDIR)/_artifacts
KUBECONFIG_LOCAL := $(CURDIR)/_output/kubeconfig
GPUCONFORM := $(CURDIR)/_output/bin/gpuconform
# The maintainers' harnesses (selfcheck, hardening, scale), kept out of the shipped binary; selfcheck and
# hardening run $(GPUCONFORM), so they need `build` first.
GPUCONFORM_DEV := $(CURDIR)/_output/bin/gpuconform-dev
BUILD_DEV = $(GO) build -o $(GPUCONFORM_DEV) ./cmd/gpuconform-dev
# Extra arguments for the suite, e.g. E2E_ARGS='--ginkgo.label-filter=path:dra'.
E2E_ARGS ?=
E2E_TIMEOUT ?= 60m
# Ginkgo processes for the suite (gpuconform run --procs). On this 2-core machine the processes mostly wait,
# on the cluster or on a pool lock (the CPUs were 30-70% busy with 3 and with 6), so more processes run more of
# what the locks allow: 6 finished the suite in 15m46s where 3 took 17m23s, and the stoppers waiting their
# turn (stops:node, one at a time) hold up to four processes idle, so 9. Specs run side by side except where a spec leases
# one node of its path (holds:node, beside the other nodes' holders and the other path's specs), holds its
# path (holds:path, beside the other path's specs) or the nodes (holds:nodes, alone), stops a node
# (stops:node, one at a time) or upgrades the canary (holds:canary, beside all but the stoppers and device
# faults). 1 runs in one process. Several processes take the specs in
# Ginkgo's order, which registers each path's container whole; randomizing every spec's order mixes the
# paths, so a process that holds one path finds the other path's specs to run beside it.
E2E_PROCS ?= 9
# The in-cluster runner's pod asks for 512 MiB more memory per process; its run is the allocation specs only.
INCLUSTER_PROCS ?= 3
E2E_ORDER = $(if $(filter-out 1,$(E2E_PROCS)),--ginkgo.randomize-all)
# The local cluster is this checkout's own: a run killed before its cleanup (a CI job's time limit, a restarted
# machine, a second Ctrl-C) left its labelled objects there, and each local run deletes them first instead of
# refusing to start. Against a cluster of yours the suite refuses unless you pass --cleanup-leftovers yourself.
# The failed-worker pods tolerate their node's NotReady 2s instead of the default 10s: a wait that only the
# local runs shorten (each node stopper is in the one-at-a-time chain), listed in the record's parameters.
# The local node autoscaler's pool and taint (infra/localcluster/autoscaler.go, AutoscalingRunArgs) name the
# node group the cluster autoscaling scenario grows.
LOCAL_RUN_ARGS ?= --cleanup-leftovers --eviction-toleration=2s --autoscaling-pool=gpuconform.io/pool=autoscaled --autoscaling-toleration=gpuconform.io/autoscaled:NoSchedule
# The AI Conformance metadata make e2e writes into the local run's PRODUCT.yaml.
PRODUCT_METADATA ?= $(CURDIR)/fixtures/conformance/local-product.yaml

.PHONY: FORCE help build images incluster unit vet lint browser cluster cluster-down cluster-logs e2e test report selfcheck selfcheck-ci hardening sharing sharing-ci bench scale clean gpu-smoke ptx

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: $(GPUCONFORM) ## build the gpuconform CLI into _output/bin (static: it is also the runner image's binary)

# The CLI's inputs: every file and directory of the module's packages (sources, what they embed; a directory's
# time changes when a file is removed), go.mod, go.sum and the version it is stamped with. make skips
# `go build` when the binary is newer than all of them: go's own up-to-date check hashes every package, seconds
# on 2 cores, most of a no-op `make cluster`.
GO_INPUTS := $(shell find cmd fixtures framework infra internal reports scenarios suites -not -path 'infra/modules/*' \( -type f -o -type d \) 2>/dev/null) go.mod go.sum
$(GPUCONFORM): $(GO_INPUTS) _output/bin/.ldflags
	@mkdir -p _output/bin
	$(GO) build -ldflags "$(LDFLAGS_VERSION)" -o $(GPUCONFORM) ./cmd/gpuconform

_output/bin/.ldflags: FORCE
	@mkdir -p _output/bin; [ "$$(cat $@ 2>/dev/null)" = '$(LDFLAGS_VERSION)' ] || echo '$(LDFLAGS_VERSION)' > $@

FORCE:

# The images' tag and the binaries' version: the checkout's description.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS_VERSION := -X main.version=$(VERSION) -X main.revision=$(REVISION)
IMAGE_BINARIES := ./cmd/gpuconform ./cmd/gpu-workload ./cmd/fake-device-plugin ./cmd/gpuconform-net ./cmd/nvidia-smi

images: build ## write the workload and runner images as OCI archives into _output/images (offline; push them with skopeo or crane)
	@mkdir -p _output/images/bin
	$(GO) build -ldflags "-s -w $(LDFLAGS_VERSION)" -o _output/images/bin/ $(IMAGE_BINARIES)
	$(GPUCONFORM) images --bin _output/images/bin --out _output/images --tag $(VERSION)

unit: ## unit tests (no cluster); the fake's MIG geometry is checked against go-nvml's mock H100, which needs cgo
	$(GO) test $$($(GO) list ./... | grep -v /suites/)
	CGO_ENABLED=1 $(GO) test -run TestProfilesMatchNVML ./internal/fakegpu/

browser: ## install Debian's chromium (as root) so the unit tests open the HTML signoff in a real headless browser
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; }; } || true
	@command -v chromium >/dev/null 2>&1 && echo "browser: $$(chromium --version 2>/dev/null)" || echo "browser: chromium could not be installed; the headless-browser check of the HTML signoff is skipped"

vet: ## go vet
	$(GO) vet ./...

# golangci-lint's own limit; a cold cache on two cores type-checks the whole module in about four minutes.
LINT_TIMEOUT ?= 15m

lint: vet ## go vet, gofmt and golangci-lint (pinned in go.mod, configured in .golangci.yml)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) tool golangci-lint run --timeout=$(LINT_TIMEOUT) ./...

cluster: build ## bring up (or revive) the local offline GPU cluster
	$(GPUCONFORM) cluster up

cluster-down: build ## delete the local cluster (caches stay)
	$(GPUCONFORM) cluster down

cluster-logs: build ## collect the local cluster's logs into $(ARTIFACTS)/cluster-logs
	$(GPUCONFORM) cluster logs $(ARTIFACTS)/cluster-logs

# The upgrade rehearsals of make e2e and make bench go through the command provider and the shipped scripts
# for the local cluster (fixtures/upgrade/local-fake.sh for the driver, local-fake-dra.sh for the DRA
# driver's kubelet plugin), so the script contract is exercised on every run;
# its kubectl is the one the cluster build made (_output/bin). UPGRADE_ARGS= uses the built-in provider.
UPGRADE_ARGS ?= --upgrade-command=$(CURDIR)/fixtures/upgrade/local-fake.sh --dra-upgrade-command=$(CURDIR)/fixtures/upgrade/local-fake-dra.sh

e2e: cluster ## run the suites against the local cluster and write the signoff report into $(ARTIFACTS)
	@mkdir -p $(ARTIFACTS)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./suites/localstack/ -args --kubeconfig=$(KUBECONFIG_LOCAL) \
		--ginkgo.no-color --ginkgo.json-report=$(ARTIFACTS)/localstack-report.json 2>&1 | tee $(ARTIFACTS)/localstack.log
	@echo "▶ conformance suite (gpuconform run, disruptive specs included; the last run took $$(cat $(ARTIFACTS)/.conformance-wall 2>/dev/null || echo '?')); one line per finished spec, the whole log in $(ARTIFACTS)/conformance.log"
	@start=$$(date +%s); PATH="$(CURDIR)/_output/bin:$$PATH" $(GPUCONFORM) run --kubeconfig=$(KUBECONFIG_LOCAL) --artifacts=$(ARTIFACTS) --disruptive --timeout=$(E2E_TIMEOUT) \
		--procs=$(E2E_PROCS) $(E2E_ORDER) --ginkgo.fail-on-empty --product-metadata=$(PRODUCT_METADATA) $(LOCAL_RUN_ARGS) $(UPGRADE_ARGS) $(E2E_ARGS) > $(ARTIFACTS)/conformance.log 2>&1 & pid=$$!; \
	tail -n +1 -F --pid=$$pid $(ARTIFACTS)/conformance.log 2>/dev/null | grep --line-buffered -oE '\[gpuconform\] .*|^not exercised.*'; \
	wait $$pid; rc=$$?; echo "$$(( $$(date +%s) - start ))s" > $(ARTIFACTS)/.conformance-wall; \
	$(GPUCONFORM) bench $(ARTIFACTS) | tail -n +3 || true; \
	$(GPUCONFORM) report --check-product $(ARTIFACTS)/PRODUCT.yaml 2>&1 | grep -E '^problem|fit to submit' || true; \
	$(GPUCONFORM) report $(ARTIFACTS) > /dev/null; vrc=$$?; \
	if [ $$rc -ne 0 ] && [ $$vrc -eq 0 ]; then vrc=1; fi; exit $$vrc

# The runner image's name in the local cluster (make images tags it with VERSION).
RUNNER_IMAGE ?= gpuconform.local/gpuconform:$(VERSION)

incluster: images cluster ## run the allocation specs as a Job on the local cluster (gpuconform run --in-cluster), copy the artifacts back, and require them to pass with nothing left (INCOMPLETE only for the filter)
	@mkdir -p $(ARTIFACTS)
	$(GPUCONFORM) cluster load _output/images/gpuconform.oci.tar
	$(GPUCONFORM) run --in-cluster --image=$(RUNNER_IMAGE) --kubeconfig=$(KUBECONFIG_LOCAL) --artifacts=$(ARTIFACTS)/incluster --procs=$(INCLUSTER_PROCS) $(LOCAL_RUN_ARGS) \
		--require=scenario:allocation --ginkgo.label-filter=scenario:allocation --ginkgo.fail-on-empty > $(ARTIFACTS)/incluster.log 2>&1; \
	rc=$$?; grep -oE '^gpuconform-runner.*|\[gpuconform\] .*|^(verdict|signoff).*' $(ARTIFACTS)/incluster.log; \
	if [ $$rc -eq 3 ] && ! grep '^- incomplete:' $(ARTIFACTS)/incluster/signoff.md | grep -qv 'filtered run'; then \
		echo "incluster: INCOMPLETE only because the run is filtered to the allocation specs: accepted"; rc=0; fi; exit $$rc

bench: cluster ## run the conformance suite (disruptive specs included) and print its own cost: wall vs inherent waits, API requests (kept in $(ARTIFACTS)/bench)
	@mkdir -p $(ARTIFACTS)/bench
	PATH="$(CURDIR)/_output/bin:$$PATH" $(GPUCONFORM) run --kubeconfig=$(KUBECONFIG_LOCAL) --artifacts=$(ARTIFACTS)/bench --disruptive --timeout=$(E2E_TIMEOUT) \
		--procs=$(E2E_PROCS) $(E2E_ORDER) $(LOCAL_RUN_ARGS) $(UPGRADE_ARGS) $(E2E_ARGS) > $(ARTIFACTS)/bench/conformance.log 2>&1 || true
	$(GPUCONFORM) bench $(ARTIFACTS)/bench

scale: ## preflight, discovery and diagnose against a simulated 5,000-node GPU cluster (a throwaway API server built here)
	$(BUILD_DEV)
	$(GPUCONFORM_DEV) scale --nodes=$(SCALE_NODES)

SCALE_NODES ?= 5000

report: build ## render the signoff report from $(ARTIFACTS)
	$(GPUCONFORM) report $(ARTIFACTS)

# Faults `make selfcheck` proves (default: every fault of the fake GPU stack), e.g. SELFCHECK_FAULTS=leak-all.
SELFCHECK_FAULTS ?=

selfcheck: cluster ## on the local cluster: switch each fake-GPU fault on and require the specs that must catch it to fail
	$(BUILD_DEV)
	$(GPUCONFORM_DEV) selfcheck --gpuconform=$(GPUCONFORM) --kubeconfig=$(KUBECONFIG_LOCAL) --artifacts=$(ARTIFACTS)/selfcheck --faults=$(SELFCHECK_FAULTS)

# The faults CI proves on every run (a fast subset of `make selfcheck`: one per kind of check).
SELFCHECK_CI_FAULTS ?= wrong-ids,leak-all,kueue-webhook-skips-validation,metrics-api-unavailable,monitoring-own-namespace-only

selfcheck-ci: cluster ## the fast subset of make selfcheck that CI runs
	$(BUILD_DEV)
	$(GPUCONFORM_DEV) selfcheck --gpuconform=$(GPUCONFORM) --kubeconfig=$(KUBECONFIG_LOCAL) --artifacts=$(ARTIFACTS)/selfcheck --faults=$(SELFCHECK_CI_FAULTS)

# Hardening variations `make hardening` proves (default: all), e.g. HARDENING_VARIANTS=dedication-taint.
HARDENING_VARIANTS ?=

hardening: cluster ## on the local cluster: taint the GPU nodes, enforce restricted admission, run as a team in one namespace, put quotas and LimitRanges on the namespaces, restart the device plugin as the run starts; require GO (NO-GO for an untolerated taint, a queue without preemption or Kueue's controller scaled to zero)
	$(BUILD_DEV)
	$(GPUCONFORM_DEV) hardening --gpuconform=$(GPUCONFORM) --kubeconfig=$(KUBECONFIG_LOCAL) --artifacts=$(ARTIFACTS)/hardening --variants=$(HARDENING_VARIANTS)

# Sharing modes `make sharing` proves (default: all), e.g. SHARING_MODES=mig-mixed.
SHARING_MODES ?=
# The mode CI proves on every run: MIG mixed covers MIG devices on the device plugin, whole GPUs beside
# them, and partitionable DRA GPUs through shared counters, with the allocation scenario on top.
SHARING_CI_MODES ?= mig-mixed

sharing: cluster ## on the local cluster: bring the fake GPUs into each sharing mode (time-slicing, MPS, MIG single and mixed with DRA partitions) in turn and require the sharing scenario (and allocation, where the mode's row says) GO; ends with whole GPUs
	$(BUILD_DEV)
	$(GPUCONFORM_DEV) sharing --gpuconform=$(GPUCONFORM) --kubeconfig=$(KUBECONFIG_LOCAL) --artifacts=$(ARTIFACTS)/sharing --modes=$(SHARING_MODES)

sharing-ci: cluster ## the sharing mode CI proves (SHARING_CI_MODES), then whole GPUs again
	$(BUILD_DEV)
	$(GPUCONFORM_DEV) sharing --gpuconform=$(GPUCONFORM) --kubeconfig=$(KUBECONFIG_LOCAL) --artifacts=$(ARTIFACTS)/sharing --modes=$(SHARING_CI_MODES)

test: lint browser unit selfcheck-ci sharing-ci incluster e2e ## what CI runs: vet, gofmt and golangci-lint, unit tests, a selfcheck subset, one sharing mode, the in-cluster runner, then the suites on the local cluster (its signoff line last)

# A GPU host needs only the NVIDIA driver: the workload binary opens its libcuda and runs the suite's PTX kernels.
# Built here (or carried there prebuilt in _output/bin when the host has no Go).
GPU_SMOKE_LOAD ?= 30s
gpu-smoke: ## on a GPU host: the workload binary's device test, a $(GPU_SMOKE_LOAD) FMA/copy load and the latency probe alone and beside a compute-heavy neighbour; transcript in $(ARTIFACTS)/gpu-smoke.jsonl
	@mkdir -p _output/bin $(ARTIFACTS)
	@[ -x _output/bin/gpu-workload ] && ! command -v $(GO) >/dev/null || $(GO) build -o _output/bin/gpu-workload ./cmd/gpu-workload
	_output/bin/gpu-workload smoke --load-duration $(GPU_SMOKE_LOAD) --out $(ARTIFACTS)/gpu-smoke.jsonl

ptx: ## regenerate internal/cuda/kernels/kernels.ptx from kernels.cu with Debian's clang (apt-get install clang-14); the PTX is committed, so builds need no clang
	clang-14 -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_52 -O2 -S -o internal/cuda/kernels/kernels.ptx internal/cuda/kernels/kernels.cu

clean: ## remove this checkout's outputs (the machine-wide build cache stays)
	rm -rf _output _artifacts
