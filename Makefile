# Sluice — top-level build. Every target works on a fresh clone; the slow
# control-plane build (make envtest) is cached under bin/ (git-ignored).
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GOOS   := $(shell go env GOOS)
GOARCH := $(shell go env GOARCH)
K8S_VERSION  ?= 1.37.2
ETCD_VERSION ?= 3.6.6
ARGOCD_VERSION ?= v2.14.21
GITEA_VERSION ?= v1.27.3
REGISTRY_VERSION ?= v3.1.2
ENVTEST_DIR  := $(CURDIR)/bin/k8s/$(K8S_VERSION)-$(GOOS)-$(GOARCH)
export KUBEBUILDER_ASSETS := $(ENVTEST_DIR)

# Go modules of the workspace, in dependency order.
MODULES := policies operator/api kit runtime infra-validator operator gitops-syncer e2e

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/sluice-gitops/sluice/kit/version
LDFLAGS := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT) -X $(VERSION_PKG).Date=$(DATE)

CONTROLLER_GEN := $(CURDIR)/bin/controller-gen-v0.23.0
TEST_TIMEOUT ?= 25m
GOTEST_FLAGS ?= -count=1

.PHONY: help
help: ## Show the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(CONTROLLER_GEN):
	@echo "tools: building controller-gen v0.23.0 (pinned in operator/hack/tools/go.mod)"
	@mkdir -p bin
	cd operator/hack/tools && GOWORK=off go build -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code and CRD YAML with controller-gen.
	cd operator/api && $(CONTROLLER_GEN) object paths=./v1alpha1/...
	cd operator/api && $(CONTROLLER_GEN) crd paths=./v1alpha1/... output:crd:artifacts:config=crds
	@# charts/sluice ships copies (a chart installs from its folder alone); a drift test guards them.
	rm -f charts/sluice/crds/*.yaml && cp operator/api/crds/*.yaml charts/sluice/crds/
	cp operator/config/admission/policies.yaml charts/sluice/files/admission-policies.yaml
	cp operator/config/rbac/users.yaml charts/sluice/files/user-roles.yaml

.PHONY: verify-generate
verify-generate: generate ## Fail when generated files are stale.
	@if [ -n "$$(git status --porcelain -- operator/api charts/sluice)" ]; then \
	  echo "generated files are stale; run 'make generate' and commit:"; git status --porcelain -- operator/api charts/sluice; git --no-pager diff --stat -- operator/api charts/sluice; exit 1; fi

.PHONY: envtest
envtest: ## Build kube-apiserver and etcd for tests (once; cached in bin/k8s).
	@K8S_VERSION=$(K8S_VERSION) ETCD_VERSION=$(ETCD_VERSION) operator/hack/envtest.sh

.PHONY: argocd
argocd: ## Build Argo CD's controller, repo-server and plugin server for tests (once; cached in bin/argocd).
	@ARGOCD_VERSION=$(ARGOCD_VERSION) operator/hack/argocd/build.sh

.PHONY: gitea
gitea: ## Build Gitea for the real-forge tests (once; cached in bin/gitea).
	@GITEA_VERSION=$(GITEA_VERSION) hack/gitea/build.sh

.PHONY: registry
registry: ## Build the CNCF distribution registry for the real-registry tests (once; cached in bin/registry).
	@REGISTRY_VERSION=$(REGISTRY_VERSION) hack/registry/build.sh

.PHONY: prometheus
prometheus: ## Install prometheus (Debian package) for the verification tests when it is missing.
	@if command -v prometheus >/dev/null; then echo "prometheus: $$(prometheus --version 2>&1 | head -1)"; \
	elif [ "$$(id -u)" = 0 ]; then echo "prometheus: installing prometheus with apt-get"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null; }; \
	  prometheus --version 2>&1 | head -1; \
	else echo "prometheus: prometheus is missing and only root can install it: run 'sudo apt-get install -y prometheus'" >&2; exit 1; fi

.PHONY: redis
redis: ## Install redis-server (Debian package) for the Argo CD tests when it is missing.
	@if command -v redis-server >/dev/null; then echo "redis: $$(redis-server --version | cut -d' ' -f1-3)"; \
	elif [ "$$(id -u)" = 0 ]; then echo "redis: installing redis-server with apt-get"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null; }; \
	  redis-server --version; \
	else echo "redis: redis-server is missing and only root can install it: run 'sudo apt-get install -y redis-server'" >&2; exit 1; fi

# Images (hack/images, its own module built with GOWORK=off like
# operator/hack/tools): see README.md "Images".
IMAGES_TOOL := $(CURDIR)/bin/images-tool
IMAGES_DIR  := $(CURDIR)/bin/images

.PHONY: images-tool
images-tool: ## Build the image tool (bin/images-tool; generic `build` verb for other images).
	@mkdir -p bin
	cd hack/images && GOWORK=off CGO_ENABLED=0 go build -trimpath -o $(IMAGES_TOOL) .

# The commit time stamps the binaries and dates every image so that one
# commit always gives the same digests.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_ARCHES ?= amd64,arm64
# make test builds amd64 only: an arm64 cross-build compiles every
# dependency again (see README.md "Images"), which CI's 70 minutes cold do
# not hold; the image tool's own tests still build and verify arm64.
TEST_IMAGE_ARCHES ?= amd64
# The runner image's terraform per architecture (static builds only); see
# README.md "Images" for why arm64 has none here.
TERRAFORM_AMD64 ?= $(shell command -v terraform 2>/dev/null)
IMAGE_TERRAFORM := $(if $(TERRAFORM_AMD64),-terraform amd64=$(TERRAFORM_AMD64)) $(if $(TERRAFORM_ARM64),-terraform arm64=$(TERRAFORM_ARM64))

.PHONY: images
images: images-tool ## Build, sign and SBOM the images into bin/images (OCI layout + per-arch tarballs); no Docker, no registry.
	$(IMAGES_TOOL) release -root . -out $(IMAGES_DIR) -chart charts/sluice -arch $(IMAGE_ARCHES) \
	  -stamp-version $(VERSION) -commit $(COMMIT) -epoch $(SOURCE_DATE_EPOCH) $(IMAGE_TERRAFORM)

# SIGNING_PUB: the public key to verify with (a release's own); default the
# local one `make images` created.
SIGNING_PUB ?= $(IMAGES_DIR)/cosign.pub

.PHONY: verify-images
verify-images: images-tool ## Check every signature and SBOM in bin/images/oci and the chart's default images; lint and test the image tool.
	$(IMAGES_TOOL) verify -layout $(IMAGES_DIR)/oci -chart charts/sluice -pub $(SIGNING_PUB)
	@out=$$(gofmt -l hack/images); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	cd hack/images && GOWORK=off go vet ./... && GOWORK=off go test $(GOTEST_FLAGS) ./...

.PHONY: node
node: ## Build kubelet & co, CoreDNS and kube-router for the e2e node (once per version; cached in bin/node).
	@K8S_VERSION=$(K8S_VERSION) hack/realnode/build.sh

# The Debian packages a real node needs (containerd, runc, the CNI plugins
# and the iptables tools kube-proxy and kube-router drive).
NODE_PACKAGES := containerd runc containernetworking-plugins iptables conntrack socat ethtool ipset

.PHONY: e2e-deps
e2e-deps: ## Install the Debian packages of the e2e node when missing (root only).
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "e2e-deps: $(NODE_PACKAGES) installed"; \
	elif [ "$$(id -u)" = 0 ]; then echo "e2e-deps: installing" $$missing "with apt-get"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; }; \
	else echo "e2e: cannot run here: packages" $$missing "are missing and only root can install them (a real node needs root anyway)" >&2; exit 3; fi

.PHONY: e2e-images
e2e-images: images-tool ## Sluice's images (amd64) and the e2e node's own (pause, CoreDNS, the test app, Gitea, into bin/images/e2e); kubectl-sluice.
	@$(MAKE) --no-print-directory images IMAGE_ARCHES=$(TEST_IMAGE_ARCHES)
	@hack/realnode/images.sh
	@# The tests approve with kubectl sluice (unstamped: a stamp's date would relink it every run).
	go build -o bin/kubectl-sluice ./operator/cmd/kubectl-sluice

.PHONY: e2e
e2e: ## Bring a real one-node cluster up, install charts/sluice, run the e2e tests through pods, tear it down.
	@if [ "$$(id -u)" != 0 ]; then echo "e2e: cannot run here: a real node needs root (kubelet, containerd, iptables); the unit and envtest suites do not" >&2; exit 3; fi
	@$(call step,e2e-deps)
	@$(call step,prometheus)
	@$(call step,envtest)
	@$(call step,node)
	@$(call step,gitea)
	@$(call step,e2e-images)
	@t0=$$(date +%s); rc=0; hack/realnode/e2e.sh || rc=$$?; \
	  echo "== step e2e.sh (node up, tests, down): $$(( $$(date +%s) - t0 )) s, exit code $$rc"; exit $$rc

.PHONY: build
build: ## Build every module and the binaries into bin/.
	@mkdir -p bin
	@for m in $(MODULES); do echo "go build ./$$m/..."; go build ./$$m/...; done
	@for cmd in operator/cmd/operator operator/cmd/kubectl-sluice gitops-syncer/cmd/gitops-syncer infra-validator/cmd/infra-validator operator/hack/controlplane; do \
	  if [ -d $$cmd ]; then echo "go build -o bin/$$(basename $$cmd) ./$$cmd"; go build -ldflags "$(LDFLAGS)" -o bin/$$(basename $$cmd) ./$$cmd; fi; done

.PHONY: lint
lint: check-deps ## gofmt and go vet over every module, and the module graph check.
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do echo "go vet ./$$m/..."; go vet ./$$m/...; done

# Only the operator (and its tests) may depend on Argo CD: every other module
# (the API module, kit, the validator library, the syncer) stays light.
LIGHT_MODULES := policies operator/api kit infra-validator gitops-syncer

.PHONY: check-deps
check-deps: ## Fail when a light module's dependency graph names Argo CD.
	@for m in $(LIGHT_MODULES); do \
	  if (cd $$m && GOWORK=off go mod graph) | grep -q 'github.com/argoproj/argo-cd'; then \
	    echo "$$m depends on Argo CD (GOWORK=off go mod graph | grep argo-cd in $$m); only the operator may"; exit 1; fi; \
	  echo "$$m: no Argo CD in its module graph"; done

# step runs one make target and prints how long it took (CI reads these lines).
step = t0=$$(date +%s); $(MAKE) --no-print-directory $(1); echo "== step $(1): $$(( $$(date +%s) - t0 )) s"

.PHONY: test
test: ## Lint, check generated files, run every module's tests against a real control plane, then make e2e on a real node (each step timed).
	@$(call step,envtest)
	@$(call step,argocd)
	@$(call step,gitea)
	@$(call step,registry)
	@$(call step,redis)
	@$(call step,prometheus)
	@$(call step,verify-generate)
	@$(call step,lint)
	@$(call step,images IMAGE_ARCHES=$(TEST_IMAGE_ARCHES))
	@$(call step,verify-images)
	@echo "KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS)"
	@for m in $(MODULES); do echo "== go test ./$$m/..."; t0=$$(date +%s); go test $(GOTEST_FLAGS) -timeout $(TEST_TIMEOUT) ./$$m/...; echo "== step go test ./$$m/...: $$(( $$(date +%s) - t0 )) s"; done
	@$(call step,bench-smoke)
	@# A real node (root, containerd); where there is none, make e2e says
	@# why and the step fails (after the module tests above ran).
	@$(call step,e2e)

.PHONY: test-busy
test-busy: ## make test three times (RUNS=n) with every core kept busy by stress-ng; prints each run's time.
	hack/busy/run.sh

# Every module's hack/bench.sh in turn; the first that fails stops make
# bench with its message (every wait in them has a deadline).
.PHONY: bench
bench: envtest ## Run the benchmarks and print the figures the issues ask for.
	@ran=0; for m in $(MODULES); do if [ -x $$m/hack/bench.sh ]; then ran=1; echo "== $$m/hack/bench.sh"; t0=$$(date +%s); \
	  $$m/hack/bench.sh || { echo "bench: $$m/hack/bench.sh FAILED"; exit 1; }; echo "== $$m/hack/bench.sh: $$(( $$(date +%s) - t0 )) s"; fi; done; \
	  if [ $$ran = 0 ]; then echo "bench: not built yet (see README)"; fi

# A broken benchmark fails make test: one short iteration of each (their
# figures mean nothing here), the full run stays make bench.
.PHONY: bench-smoke
bench-smoke: ## make bench with one short iteration of each benchmark (BENCH_SMOKE=1); a make test step.
	@BENCH_SMOKE=1 $(MAKE) --no-print-directory bench

.PHONY: demo
demo: envtest build ## Push-to-applied walkthrough on an embedded control plane.
	operator/hack/demo.sh

.PHONY: demo-argocd
demo-argocd: envtest argocd redis build ## One release delivered through a real Argo CD and the Sluice plugin.
	operator/hack/argocd/demo.sh

.PHONY: tidy
tidy: ## go mod tidy every module, then align them on one dependency set.
	@for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy); done
	go work sync
