# pelwarden — every target works on a fresh machine with Go 1.26 and
# redis-server on PATH (.ci/run installs it with apt-get).

GO        ?= go
BIN       := bin/pelwarden
LINT      := $(GO) tool -modfile=tools/golangci-lint/go.mod golangci-lint
BUF       := $(GO) tool buf
BENCHTIME ?= 2s
BENCH_PEL ?= 200000,1000000
# KUBE_BIN is a directory with etcd and kube-apiserver binaries (as
# setup-envtest provides them); test-kube needs it, bench uses it if set.
KUBE_BIN  ?=

.PHONY: all build test test-kube lint generate bench demo fuzz chaos image clean

all: build

## build: the pelwarden binary in bin/
build:
	$(GO) build -trimpath -o $(BIN) ./cmd/pelwarden

## test: unit, end-to-end and fuzz-seed tests against real redis-server processes
test:
	$(GO) test -race -count=1 -timeout 15m ./...

## test-kube: the real-API suite, built with the kube tag: etcd and
## kube-apiserver from KUBE_BIN (make test-kube KUBE_BIN=../shared/kube/bin)
## serve pelwarden's pod watch through API server restarts and a failover,
## the chart's RBAC and a server-side dry run of every chart render, then
## the API server restart benchmark runs once. Fails, never skips, without
## the binaries. About 3 minutes on 2 cores.
test-kube:
	@test -n "$(KUBE_BIN)" || { echo "make test-kube needs KUBE_BIN=<directory with etcd and kube-apiserver>" >&2; exit 1; }
	PELWARDEN_KUBE_BIN=$(abspath $(KUBE_BIN)) $(GO) test -tags kube -race -count=1 -p 1 -timeout 15m -run '^TestRealAPI' \
		./internal/kubetest/ ./test/ ./test/chart/
	PELWARDEN_KUBE_BIN=$(abspath $(KUBE_BIN)) $(GO) test -tags kube -count=1 -timeout 15m -run '^$$' \
		-bench '^BenchmarkAPIRestartToCurrentVerdicts$$' -benchtime 1x ./bench/

## lint: golangci-lint (pinned in tools/golangci-lint), buf lint, and buf
## breaking against main (changes to pelwarden.v1 must stay wire-compatible)
lint:
	$(LINT) run ./...
	$(BUF) lint
	$(BUF) breaking --against '.git#branch=main'


## generate: Go code from proto/ (plugins pinned in go.mod's tool block)
generate:
	$(BUF) generate

## bench: the comparative suite against real redis-server processes: one
## markdown table on stdout (progress on stderr) and bench/results.json;
## fails if any benchmark fails its own result check. About 10 minutes on
## 2 cores. BENCHTIME sizes the poll and refresh runs, BENCH_PEL the ghost
## PELs of the reclaim comparison. With KUBE_BIN set, the table also has the
## API server restart row (2 more minutes); without, the row is left out.
bench:
	$(GO) run ./bench/report -o bench/results.json -benchtime $(BENCHTIME) -pel $(BENCH_PEL) \
		$(if $(KUBE_BIN),-kube-bin $(abspath $(KUBE_BIN)))

## demo: a throwaway redis-server and pelwarden with live and ghost workers
demo:
	$(GO) run ./cmd/pelwarden-demo

## chaos: the chaos suite at full size (make test runs it at a bounded size)
chaos:
	PELWARDEN_CHAOS=full $(GO) test -count=1 -v -run TestChaos -timeout 30m ./test/chaos/

## fuzz: run each fuzz target for a while (make test runs their seeds)
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzLoadYAML -fuzztime 60s ./internal/config/
	$(GO) test -run '^$$' -fuzz FuzzLoadEnv -fuzztime 60s ./internal/config/
	$(GO) test -run '^$$' -fuzz FuzzRequestValidation -fuzztime 60s ./internal/admin/

## image: the container image (Dockerfile: static binary on distroless, nonroot)
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf bin/
