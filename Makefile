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
MODULES   := cmd/pelwarden-demo bench/report test/chart
BENCHTIME ?= 2s
BENCH_PEL ?= 200000,1000000
# The release `pelwarden version` reports in the image, and the image's name.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE     ?= pelwarden:dev

.PHONY: all build test lint generate bench demo fuzz chaos image clean

all: build

## build: the pelwarden binary in bin/
build:
	$(GO) build -trimpath -o $(BIN) ./cmd/pelwarden

## test: unit, end-to-end and fuzz-seed tests against real redis-server
## processes, then the nested modules' tests (the chart checks among them)
test:
	$(GO) test -race -count=1 -timeout 15m ./...
	set -e; for m in $(MODULES); do $(GO) -C $$m test -race -count=1 -timeout 15m ./...; done

## lint: golangci-lint (pinned in tools/golangci-lint) on every module, buf
## lint, and buf breaking against main (changes to pelwarden.v1 must stay
## wire-compatible)
lint:
	$(LINT) run ./...
	set -e; for m in $(MODULES); do (cd $$m && $(LINT) run ./...); done
	$(BUF) lint
	$(BUF) breaking --against '.git#branch=main'


## generate: Go code from proto/ (buf and the plugins pinned in tools/buf)
generate:
	$(BUF) generate

## bench: the comparative suite against real redis-server processes: one
## markdown table on stdout (progress on stderr) and bench/results.json;
## fails if any benchmark fails its own result check. About 10 minutes on
## 2 cores. BENCHTIME sizes the poll and refresh runs, BENCH_PEL the ghost
## PELs of the reclaim comparison.
bench:
	$(GO) -C bench/report build -o $(CURDIR)/bin/bench-report .
	bin/bench-report -o bench/results.json -benchtime $(BENCHTIME) -pel $(BENCH_PEL)

## demo: a throwaway redis-server and pelwarden with live and ghost workers
demo:
	$(GO) -C cmd/pelwarden-demo build -o $(CURDIR)/bin/pelwarden-demo .
	bin/pelwarden-demo

## chaos: the chaos suite at full size (make test runs it at a bounded size)
chaos:
	PELWARDEN_CHAOS=full $(GO) test -count=1 -v -run TestChaos -timeout 30m ./test/chaos/

## fuzz: run each fuzz target for a while (make test runs their seeds)
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzLoadYAML -fuzztime 60s ./internal/config/
	$(GO) test -run '^$$' -fuzz FuzzLoadEnv -fuzztime 60s ./internal/config/
	$(GO) test -run '^$$' -fuzz FuzzRequestValidation -fuzztime 60s ./internal/admin/

## image: the container image $(IMAGE) (Dockerfile: static binary on
## distroless, nonroot), its binary reporting $(VERSION)
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf bin/
