package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// machine is where the figures come from.
type machine struct {
	Date            string  `json:"date"`
	GOOS            string  `json:"goos"`
	GOARCH          string  `json:"goarch"`
	CPUs            int     `json:"cpus"`
	CPUModel        string  `json:"cpu_model,omitempty"`
	GoVersion       string  `json:"go_version"`
	RedisVersion    string  `json:"redis_version"`
	DurationSeconds float64 `json:"duration_seconds"`
}

func describeMachine(ctx context.Context, at time.Time) machine {
	return machine{
		Date:         at.UTC().Format(time.RFC3339),
		GOOS:         runtime.GOOS,
		GOARCH:       runtime.GOARCH,
		CPUs:         runtime.NumCPU(),
		CPUModel:     cpuModel(),
		GoVersion:    goVersion(ctx),
		RedisVersion: redisVersion(ctx),
	}
}

// goVersion is the toolchain that builds the benchmarks, which is the one
// on PATH, not necessarily the one that built this command.
func goVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimSpace(string(out))
}

var redisVersionRE = regexp.MustCompile(`\bv=(\S+)`)

// redisVersion is that of the redis-server on PATH, the one the
// benchmarks start.
func redisVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "redis-server", "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return parseRedisVersion(string(out))
}

func parseRedisVersion(s string) string {
	if m := redisVersionRE.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return strings.TrimSpace(s)
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
