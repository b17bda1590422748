# pelwarden — every target works on a fresh machine with Go 1.26 and
# redis-server on PATH (.ci/run installs it with apt-get).

GO        ?= go
BIN       := bin/pelwarden
LINT      := $(GO) tool -modfile=tools/golangci-lint/go.mod golangci-lint
BUF       := $(GO) tool buf
BENCHTIME ?= 2s
BENCH_PEL ?= 200000,1000000

REDIS_DIRS ?= ../shared/redis

.PHONY: all build test compat lint generate bench demo fuzz chaos image clean

all: build

## build: the pelwarden binary in bin/
build:
	$(GO) build -trimpath -o $(BIN) ./cmd/pelwarden

## test: unit, end-to-end and fuzz-seed tests against real redis-server
## processes, then the tests of tools/promtool/metricnames (its own module)
test:
	$(GO) test -race -count=1 -timeout 15m ./...
	cd tools/promtool && $(GO) test -count=1 ./metricnames/

## compat: the end-to-end and hygiene packages (-race) once per redis-server: the one
## on PATH and each REDIS_DIRS/*/bin/redis-server; prints a pass/fail table
compat:
	bash .ci/compat $(REDIS_DIRS)

## lint: golangci-lint (pinned in tools/golangci-lint) on pelwarden and on
## tools/promtool/metricnames (its own module), buf lint, and buf
## breaking against main (changes to pelwarden.v1 must stay wire-compatible)
lint:
	$(LINT) run ./...
	cd tools/promtool && $(GO) tool -modfile=../golangci-lint/go.mod golangci-lint run ./...
	$(BUF) lint
	$(BUF) breaking --against '.git#branch=main'


## generate: Go code from proto/ (plugins pinned in go.mod's tool block)
generate:
	$(BUF) generate

## bench: the comparative suite against real redis-server processes: one
## markdown table on stdout (progress on stderr) and bench/results.json;
## fails if any benchmark fails its own result check. About 10 minutes on
## 2 cores. BENCHTIME sizes the poll and refresh runs, BENCH_PEL the ghost
## PELs of the reclaim comparison.
bench:
	$(GO) run ./bench/report -o bench/results.json -benchtime $(BENCHTIME) -pel $(BENCH_PEL)

## demo: a throwaway redis-server and pelwarden with live and ghost workers.
## The first build on a machine compiles the whole dependency tree (about
## 800 packages, 2 to 3 minutes on 2 cores, plus module downloads): it says
## so, and counts the packages as they compile, so it does not look stuck.
demo:
	@echo "make demo: building bin/pelwarden-demo and bin/worker; a first build compiles ~800 packages (minutes), later builds take seconds"
	@bash -o pipefail -c '$(GO) build -v -o bin/ ./cmd/pelwarden-demo ./examples/worker 2>&1 | awk "$$PROGRESS"'
	@echo "make demo: starting (about 35 s)"
	./bin/pelwarden-demo

# PROGRESS is the awk program that turns `go build -v` (one package a line)
# into a count every 100 packages; lines with a space are errors, printed.
export PROGRESS := / |^\#/ { print; next } { n++ } n % 100 == 0 { printf "make demo: %d packages compiled...\n", n; fflush() } END { if (n) printf "make demo: %d packages compiled\n", n }

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
