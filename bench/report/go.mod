// The benchmark report is its own module so benchstat's parser
// (golang.org/x/perf) stays out of the service's go.mod. `make bench` builds
// it and runs it from the repository root; the benchmarks it runs, in
// ./bench, stay in the main module.
module github.com/pelwarden/pelwarden/bench/report

go 1.26.0

require (
	github.com/stretchr/testify v1.12.1
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da
)

require (
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
