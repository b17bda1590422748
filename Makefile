# pelwarden — every target works on a fresh machine with Go 1.26,
# redis-server and openssl on PATH (.ci/run installs them with apt-get).

GO        ?= go
BIN       := bin/pelwarden
# Tools are pinned in modules of their own under tools/, so their
# dependencies stay out of go.mod. LINT's path is absolute: it also runs
# inside the nested modules.
LINT      := $(GO) tool -modfile=$(CURDIR)/tools/golangci-lint/go.mod golangci-lint
BUF       := $(GO) tool -modfile=tools/buf/go.mod buf
# Nested modules, each with its own go.mod, for what only the demo
# (plotting), the benchmark report (benchstat's parser) and the chart tests
# (prometheus-operator's types) need. test and lint cover them after the
# main module.
MODULES   := cmd/pelwarden-demo bench/report test/chart tools/promtool tools/release
BENCHTIME ?= 2s
BENCH_PEL ?= 200000,1000000
# The Redis cost rows' target counts and polling intervals; BENCH_RUN, a
# regexp of the steps' -bench patterns, runs only those and merges their
# rows into bench/results.json (BENCH_RUN=Cost BENCH_COST_TARGETS=1000).
BENCH_COST_TARGETS   ?= 1000,10000
BENCH_COST_INTERVALS ?= 30s,5s
BENCH_RUN ?=
# KUBE_BIN is a directory with etcd and kube-apiserver binaries (as
# setup-envtest provides them); test-kube needs it, bench uses it if set.
KUBE_BIN  ?=
# KEDA_BIN is a directory with KEDA's keda-operator binary (and
# keda-adapter for test-hpa), KEDA_CRDS one with KEDA's CRDs; test-keda
# and test-hpa need them. HPA_RESULTS is where test-hpa writes its
# replica timelines.
KEDA_BIN  ?=
KEDA_CRDS ?=
HPA_RESULTS ?=
# The release `pelwarden version` reports, and the commit and its time,
# which stamp the binary and the image (the same commit builds the same
# image digest).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(REVISION)
# The image: its repository and tag (the version without its v, as the
# chart's appVersion), the architecture, and the tarball make image writes.
IMAGE_REPO ?= ghcr.io/pelwarden/pelwarden
IMAGE_TAG  ?= $(patsubst v%,%,$(VERSION))
ARCH       ?= $(shell $(GO) env GOARCH)
IMAGE_OUT  ?= bin/pelwarden-image.tar
# The release tool (tools/release, a module of its own) builds the image and
# packages the chart without Docker or helm.
RELEASE_TOOL := $(GO) -C tools/release run .
# make release: DRY_RUN=1 builds and checks everything but creates no tag.
DRY_RUN    ?=
RELEASE_DIR = bin/release/$(VERSION)

REDIS_DIRS ?= ../shared/redis
# REDIS_NEXT_SERVER is a redis-server with Redis 8's stream commands
# (XACKDEL, XREADGROUP ... CLAIM, XNACK); test-redis-next needs it, bench
# uses it if set.
REDIS_NEXT_SERVER ?=

.PHONY: all build test test-kube test-keda test-hpa test-redis-next compat lint generate bench demo fuzz chaos image check-image release clean

all: build

## build: the pelwarden binary in bin/
build:
	$(GO) build -trimpath -buildvcs=true -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/pelwarden

## test: unit, end-to-end and fuzz-seed tests against real redis-server
## processes, then the shared-connection fairness test without the race
## detector (its latency bound is on pelwarden as deployed), then the
## nested modules' tests (the chart checks among them)
test:
	$(GO) test -race -count=1 -timeout 15m ./...
	$(GO) test -count=1 -timeout 5m -run '^TestBrokenScaledObjectsOnKEDAsConnection' ./test/
	set -e; for m in $(MODULES); do $(GO) -C $$m test -race -count=1 -timeout 15m ./...; done

## compat: the end-to-end, hygiene, redisx and redistest packages (-race) once
## per redis-server:
## the one on PATH and each REDIS_DIRS/*/bin/redis-server; prints a
## pass/fail table
compat:
	bash .ci/compat $(REDIS_DIRS)

## test-kube: the real-API suite, built with the kube tag: etcd and
## kube-apiserver from KUBE_BIN (make test-kube KUBE_BIN=../shared/kube/bin)
## serve pelwarden's pod watch through API server restarts and a failover,
## the chart's RBAC and a server-side dry run of every chart render, then
## the API server restart benchmark runs once. Fails, never skips, without
## the binaries. About 5 minutes on 2 cores.
test-kube:
	@test -n "$(KUBE_BIN)" || { echo "make test-kube needs KUBE_BIN=<directory with etcd and kube-apiserver>" >&2; exit 1; }
	PELWARDEN_KUBE_BIN=$(abspath $(KUBE_BIN)) $(GO) test -tags kube -race -count=1 -p 1 -timeout 15m -run '^TestRealAPI' \
		./internal/kubetest/ ./test/
	PELWARDEN_KUBE_BIN=$(abspath $(KUBE_BIN)) $(GO) -C test/chart test -tags kube -race -count=1 -timeout 15m -run '^TestRealAPI' ./...
	PELWARDEN_KUBE_BIN=$(abspath $(KUBE_BIN)) $(GO) test -tags kube -count=1 -timeout 15m -run '^$$' \
		-bench '^BenchmarkAPIRestartToCurrentVerdicts$$' -benchtime 1x ./bench/

## test-keda: KEDA's own operator drives pelwarden end to end: etcd and
## kube-apiserver from KUBE_BIN, KEDA's operator (v2.21.0) from KEDA_BIN
## and its CRDs from KEDA_CRDS (default: crds beside KEDA_BIN), pelwarden
## as a process from the chart's rendered configuration, a real
## redis-server (make test-keda KUBE_BIN=../shared/kube/bin
## KEDA_BIN=../shared/keda/bin). Then the conformance table: KEDA's own
## Redis Streams scalers (keda-oracle.gz in KEDA_BIN) beside pelwarden on
## a server, a TLS server, a cluster and sentinels. Fails, never skips,
## without the binaries.
test-keda:
	@test -n "$(KUBE_BIN)" || { echo "make test-keda needs KUBE_BIN=<directory with etcd and kube-apiserver>" >&2; exit 1; }
	@test -n "$(KEDA_BIN)" || { echo "make test-keda needs KEDA_BIN=<directory with keda-operator>" >&2; exit 1; }
	PELWARDEN_KUBE_BIN=$(abspath $(KUBE_BIN)) PELWARDEN_KEDA_BIN=$(abspath $(KEDA_BIN)) \
		$(if $(KEDA_CRDS),PELWARDEN_KEDA_CRDS=$(abspath $(KEDA_CRDS))) \
		$(GO) test -tags kube -count=1 -p 1 -timeout 15m -v -run '^TestRealKEDA' ./test/

## test-hpa: KEDA's whole scaling loop with the HPA controller: etcd,
## kube-apiserver (with its aggregation layer) and kube-controller-manager
## (HPA, Deployment and ReplicaSet controllers) from KUBE_BIN, KEDA's
## operator and metrics adapter from KEDA_BIN (a .gz of a binary is
## unpacked into a temporary directory), pelwarden from the chart's
## configuration and a real redis-server, in a network namespace of its
## own: the test binary runs itself again under unshare --net, so it needs
## root, unshare and ip. One Deployment on pelwarden's trigger beside one
## on KEDA's redis-streams trigger through ghosts, recovery, scale-down, a
## burst and a Redis outage; HPA_RESULTS=bench/hpa-loop.json writes both
## sides' replicas over time, which make generate puts in
## docs/reference/performance.md (make test-hpa KUBE_BIN=../shared/kube/bin
## KEDA_BIN=../shared/keda/bin). Fails, never skips, without the binaries
## or root. About 4 minutes.
test-hpa:
	@test -n "$(KUBE_BIN)" || { echo "make test-hpa needs KUBE_BIN=<directory with etcd, kube-apiserver and kube-controller-manager>" >&2; exit 1; }
	@test -n "$(KEDA_BIN)" || { echo "make test-hpa needs KEDA_BIN=<directory with keda-operator and keda-adapter>" >&2; exit 1; }
	PELWARDEN_KUBE_BIN=$(abspath $(KUBE_BIN)) PELWARDEN_KEDA_BIN=$(abspath $(KEDA_BIN)) \
		$(if $(KEDA_CRDS),PELWARDEN_KEDA_CRDS=$(abspath $(KEDA_CRDS))) \
		$(if $(HPA_RESULTS),PELWARDEN_HPA_RESULTS=$(abspath $(HPA_RESULTS))) \
		$(GO) test -tags kube -count=1 -p 1 -timeout 15m -v -run '^TestRealHPA' ./test/

## test-redis-next: the tests of Redis 8's stream commands (names ending
## OnRedis8: released entries, readers that claim, release mode, XACKDEL)
## on REDIS_NEXT_SERVER, which must have them, with KEDA's own scaler code
## (keda-oracle.gz in KEDA_BIN) as the oracle (make test-redis-next
## REDIS_NEXT_SERVER=../shared/redis-next/redis-unstable-2026-06-25/bin/redis-server
## KEDA_BIN=../shared/keda/bin). Fails, never skips, without them; make
## test and make compat skip these tests only where a server lacks a
## command they need.
test-redis-next:
	@test -n "$(REDIS_NEXT_SERVER)" || { echo "make test-redis-next needs REDIS_NEXT_SERVER=<redis-server with XACKDEL, XREADGROUP CLAIM and XNACK>" >&2; exit 1; }
	@test -n "$(KEDA_BIN)" || { echo "make test-redis-next needs KEDA_BIN=<directory with keda-oracle.gz>" >&2; exit 1; }
	PELWARDEN_REDIS_NEXT_SERVER=$(abspath $(REDIS_NEXT_SERVER)) PELWARDEN_KEDA_BIN=$(abspath $(KEDA_BIN)) \
		$(GO) test -tags redisnext -race -count=1 -timeout 10m -run 'OnRedis8$$' \
		./internal/redistest/ ./internal/redisx/ ./internal/reclaim/ ./test/

## lint: golangci-lint (pinned in tools/golangci-lint) on every module, buf
## lint, and buf breaking against main (changes to pelwarden.v1 must stay
## wire-compatible)
lint:
	$(LINT) run ./...
	set -e; for m in $(MODULES); do (cd $$m && $(LINT) run ./...); done
	$(BUF) lint
	$(BUF) breaking --against '.git#branch=main'


## generate: Go code from proto/ (buf and the plugins pinned in tools/buf),
## then the pages of docs/reference/ from the code and data they describe:
## the config structure, the metadata key tables, the liveness rules, the
## registered collectors, bench/results.json and bench/hpa-loop.json, the
## CLI's commands, the chart's PrometheusRule and its values.yaml and
## values.schema.json (make test fails while a page is stale)
generate:
	$(BUF) generate
	$(GO) test -count=1 -run '^TestReferencePagesAreCurrent$$' ./internal/docgen/ -args -write
	$(GO) test -count=1 -run '^TestCLIReferenceIsCurrent$$' ./cmd/pelwarden/ -args -write
	$(GO) -C test/chart test -count=1 -run '^Test(Alerts|ChartValues)ReferenceIsCurrent$$' . -args -write

## bench: the comparative suite against real redis-server processes: one
## markdown table on stdout (progress on stderr) and bench/results.json,
## which make generate puts in docs/reference/performance.md; fails if any benchmark fails its own result
## check. About 25 minutes on 2 cores, the Redis cost rows 8 of them. BENCHTIME sizes the poll and refresh runs, BENCH_PEL the ghost
## PELs of the reclaim comparison. With KUBE_BIN set, the table also has the
## API server restart row (2 more minutes); without, the row is left out.
## With REDIS_NEXT_SERVER (a redis-server with XNACK) set, it also has
## release beside requeue and raw XAUTOCLAIM, on that server, in one run.
bench:
	$(GO) -C bench/report build -o $(CURDIR)/bin/bench-report .
	bin/bench-report -o bench/results.json -benchtime $(BENCHTIME) -pel $(BENCH_PEL) \
		-cost-targets $(BENCH_COST_TARGETS) -cost-intervals $(BENCH_COST_INTERVALS) \
		$(if $(BENCH_RUN),-run '$(BENCH_RUN)') $(if $(KUBE_BIN),-kube-bin $(abspath $(KUBE_BIN))) \
		$(if $(REDIS_NEXT_SERVER),-redis-next $(abspath $(REDIS_NEXT_SERVER)))

## demo: a throwaway redis-server and pelwarden with live and ghost workers.
## The first build on a machine compiles the whole dependency tree (about
## 800 packages, 2 to 3 minutes on 2 cores, plus module downloads): it says
## so, and counts the packages as they compile, so it does not look stuck.
demo:
	@echo "make demo: building bin/pelwarden-demo and bin/worker; a first build compiles ~800 packages (minutes), later builds take seconds"
	@bash -o pipefail -c '$(GO) build -v -o bin/ ./examples/worker 2>&1 | awk "$$PROGRESS"'
	@bash -o pipefail -c '$(GO) -C cmd/pelwarden-demo build -v -o $(CURDIR)/bin/ . 2>&1 | awk "$$PROGRESS"'
	@echo "make demo: starting (about 35 s)"
	./bin/pelwarden-demo

# PROGRESS is the awk program that turns `go build -v` (one package a line)
# into a count every 100 packages; lines with a space are errors, printed.
export PROGRESS := / |^\#/ { print; next } { n++ } n % 100 == 0 { printf "make demo: %d packages compiled...\n", n; fflush() } END { if (n) printf "make demo: %d packages compiled\n", n }

## chaos: the chaos suite at full size on one server, a 3-master cluster and
## Sentinel (make test runs it at a bounded size)
chaos:
	PELWARDEN_CHAOS=full $(GO) test -count=1 -v -run TestChaos -timeout 30m ./test/chaos/

## fuzz: run each fuzz target for a while (make test runs their seeds)
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 60s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz '^FuzzParseTrigger$$' -fuzztime 60s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz '^FuzzTriggerProfile$$' -fuzztime 60s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzLoadYAML -fuzztime 60s ./internal/config/
	$(GO) test -run '^$$' -fuzz FuzzLoadEnv -fuzztime 60s ./internal/config/
	$(GO) test -run '^$$' -fuzz FuzzRequestValidation -fuzztime 60s ./internal/admin/
	$(GO) test -run '^$$' -fuzz FuzzHashSlot -fuzztime 30s ./internal/redisx/
	$(GO) test -run '^$$' -fuzz FuzzTriggerBounds -fuzztime 30s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzCheckConnection -fuzztime 30s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzMetricName -fuzztime 30s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzOwnerMatch -fuzztime 60s ./internal/liveness/
	$(GO) test -run '^$$' -fuzz FuzzUnique -fuzztime 30s ./internal/clip/
	$(GO) test -run '^$$' -fuzz FuzzLabel -fuzztime 30s ./internal/clip/
	$(GO) test -run '^$$' -fuzz FuzzCacheStaysWithinItsBounds -fuzztime 30s ./internal/bytecache/
	$(GO) test -run '^$$' -fuzz FuzzParseInfoServer -fuzztime 30s ./internal/redisx/
	$(GO) test -run '^$$' -fuzz FuzzStreamIDOrder -fuzztime 30s ./internal/redisx/
	$(GO) test -run '^$$' -fuzz FuzzHeartbeatReasonNeverQuotesTheValue -fuzztime 60s ./internal/liveness/
	$(GO) test -run '^$$' -fuzz FuzzMarkdownScanner -fuzztime 30s ./internal/doccheck/

## image: the container image as a tarball, $(IMAGE_OUT), named
## $(IMAGE_REPO):$(IMAGE_TAG), with no Docker daemon: the static binary for
## linux/$(ARCH) over a nonroot user and a CA bundle, labelled with the
## version, the commit and the license. The same commit gives the same
## digest. Push it with crane, skopeo or docker load (charts/pelwarden/README.md).
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(ARCH) $(GO) build -trimpath -buildvcs=true -ldflags "$(LDFLAGS)" \
		-o bin/linux-$(ARCH)/pelwarden ./cmd/pelwarden
	$(RELEASE_TOOL) image -binary $(abspath bin/linux-$(ARCH)/pelwarden) -arch $(ARCH) \
		-ref $(IMAGE_REPO):$(IMAGE_TAG) -version $(IMAGE_TAG) -revision $(REVISION) \
		-source https://github.com/pelwarden/pelwarden -created $(SOURCE_DATE_EPOCH) -o $(abspath $(IMAGE_OUT))

## check-image: reads $(IMAGE_OUT) as a registry would: its config (user,
## entrypoint, labels), its binary's `version`, and a second make image of
## the same commit gives the same digest
check-image:
	PELWARDEN_IMAGE=$(abspath $(IMAGE_OUT)) PELWARDEN_IMAGE_REVISION=$(REVISION) \
		$(GO) -C tools/release test -count=1 -run '^TestTheImage' .

## release: make release VERSION=vX.Y.Z [DRY_RUN=1]: checks the version's
## form, a clean tree, that the tag is free (or on HEAD) and that
## charts/pelwarden/Chart.yaml's version and appVersion are X.Y.Z; then
## builds into $(RELEASE_DIR) the image tarball, the linux binary and the
## chart (helm package's archive, chart version = appVersion = image tag),
## with SHA256SUMS; then tags HEAD vX.Y.Z, unless DRY_RUN is set. Pushing
## is left to the one who releases: the steps are printed.
release:
	$(RELEASE_TOOL) check -version $(VERSION) -repo $(CURDIR)
	rm -rf $(RELEASE_DIR)
	$(MAKE) --no-print-directory image VERSION=$(VERSION) IMAGE_OUT=$(RELEASE_DIR)/pelwarden-$(IMAGE_TAG)-image-linux-$(ARCH).tar
	cp bin/linux-$(ARCH)/pelwarden $(RELEASE_DIR)/pelwarden-$(IMAGE_TAG)-linux-$(ARCH)
	$(RELEASE_TOOL) chart -chart $(CURDIR)/charts/pelwarden -version $(IMAGE_TAG) -created $(SOURCE_DATE_EPOCH) -o $(abspath $(RELEASE_DIR))
	$(RELEASE_TOOL) sums $(abspath $(RELEASE_DIR))
	cat $(RELEASE_DIR)/SHA256SUMS
ifeq ($(DRY_RUN),)
	git rev-parse -q --verify refs/tags/$(VERSION) >/dev/null || git tag -a $(VERSION) -m "pelwarden $(VERSION)"
	@echo "tagged $(VERSION); to publish: git push origin $(VERSION), then push the image and the chart (charts/pelwarden/README.md)"
else
	@echo "dry run: $(VERSION) built in $(RELEASE_DIR); no tag was created"
endif

clean:
	rm -rf bin/
