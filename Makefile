# pelwarden — every target works on a fresh machine with Go 1.26 and
# redis-server on PATH (.ci/run installs it with apt-get).

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
MODULES   := cmd/pelwarden-demo bench/report test/chart tools/promtool
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
# KEDA_BIN is a directory with KEDA's keda-operator binary, KEDA_CRDS one
# with KEDA's CRDs; test-keda needs them.
KEDA_BIN  ?=
KEDA_CRDS ?=
# The release `pelwarden version` reports in the image, and the image's name.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE     ?= pelwarden:dev

REDIS_DIRS ?= ../shared/redis

.PHONY: all build test test-kube test-keda compat lint generate bench demo fuzz chaos image clean

all: build

## build: the pelwarden binary in bin/
build:
	$(GO) build -trimpath -o $(BIN) ./cmd/pelwarden

## test: unit, end-to-end and fuzz-seed tests against real redis-server
## processes, then the nested modules' tests (the chart checks among them)
test:
	$(GO) test -race -count=1 -timeout 15m ./...
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
## KEDA_BIN=../shared/keda/bin). Fails, never skips, without the binaries.
test-keda:
	@test -n "$(KUBE_BIN)" || { echo "make test-keda needs KUBE_BIN=<directory with etcd and kube-apiserver>" >&2; exit 1; }
	@test -n "$(KEDA_BIN)" || { echo "make test-keda needs KEDA_BIN=<directory with keda-operator>" >&2; exit 1; }
	PELWARDEN_KUBE_BIN=$(abspath $(KUBE_BIN)) PELWARDEN_KEDA_BIN=$(abspath $(KEDA_BIN)) \
		$(if $(KEDA_CRDS),PELWARDEN_KEDA_CRDS=$(abspath $(KEDA_CRDS))) \
		$(GO) test -tags kube -count=1 -p 1 -timeout 15m -v -run '^TestRealKEDA' ./test/

## lint: golangci-lint (pinned in tools/golangci-lint) on every module, buf
## lint, and buf breaking against main (changes to pelwarden.v1 must stay
## wire-compatible)
lint:
	$(LINT) run ./...
	set -e; for m in $(MODULES); do (cd $$m && $(LINT) run ./...); done
	$(BUF) lint
	$(BUF) breaking --against '.git#branch=main'


## generate: Go code from proto/ (buf and the plugins pinned in tools/buf),
## then the pages of docs/reference/ from the code they describe: the
## config structure, the metadata key table, the registered collectors and
## the chart's PrometheusRule (make test fails while a page is stale)
generate:
	$(BUF) generate
	$(GO) test -count=1 -run '^TestReferencePagesAreCurrent$$' ./internal/docgen/ -args -write
	$(GO) -C test/chart test -count=1 -run '^TestAlertsReferenceIsCurrent$$' . -args -write

## bench: the comparative suite against real redis-server processes: one
## markdown table on stdout (progress on stderr; docs/performance.md shows
## it) and bench/results.json; fails if any benchmark fails its own result
## check. About 25 minutes on 2 cores, the Redis cost rows 8 of them. BENCHTIME sizes the poll and refresh runs, BENCH_PEL the ghost
## PELs of the reclaim comparison. With KUBE_BIN set, the table also has the
## API server restart row (2 more minutes); without, the row is left out.
bench:
	$(GO) -C bench/report build -o $(CURDIR)/bin/bench-report .
	bin/bench-report -o bench/results.json -benchtime $(BENCHTIME) -pel $(BENCH_PEL) \
		-cost-targets $(BENCH_COST_TARGETS) -cost-intervals $(BENCH_COST_INTERVALS) \
		$(if $(BENCH_RUN),-run '$(BENCH_RUN)') $(if $(KUBE_BIN),-kube-bin $(abspath $(KUBE_BIN)))

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
	$(GO) test -run '^$$' -fuzz FuzzMetricName -fuzztime 30s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzOwnerMatch -fuzztime 60s ./internal/liveness/
	$(GO) test -run '^$$' -fuzz FuzzUnique -fuzztime 30s ./internal/clip/
	$(GO) test -run '^$$' -fuzz FuzzCacheStaysWithinItsBounds -fuzztime 30s ./internal/bytecache/
	$(GO) test -run '^$$' -fuzz FuzzParseInfoServer -fuzztime 30s ./internal/redisx/
	$(GO) test -run '^$$' -fuzz FuzzStreamIDOrder -fuzztime 30s ./internal/redisx/
	$(GO) test -run '^$$' -fuzz FuzzHeartbeatReasonNeverQuotesTheValue -fuzztime 60s ./internal/liveness/
	$(GO) test -run '^$$' -fuzz FuzzMarkdownScanner -fuzztime 30s ./internal/doccheck/

## image: the container image $(IMAGE) (Dockerfile: static binary on
## distroless, nonroot), its binary reporting $(VERSION)
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf bin/
