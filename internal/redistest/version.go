package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// Version is the server's answer to INFO server. Tests whose expectations
// differ between Redis versions branch on it and say which behavior they
// expect, so a run against another server shows the difference instead of
// a test loose enough to accept either.
type Version struct {
	// Product is "Redis" or "Valkey".
	Product string
	// Release is the product's own version, such as "8.0.1" for Valkey.
	Release string
	// Major and Minor are redis_version's, the Redis behavior the server
	// implements: Valkey 8.0 reports 7.2.4 there, and the Redis 8.0
	// milestones report 7.9.x.
	Major, Minor int
}

func (v Version) String() string {
	if v.Product == "Redis" {
		return fmt.Sprintf("Redis %s", v.Release)
	}
	return fmt.Sprintf("%s %s (redis_version %d.%d)", v.Product, v.Release, v.Major, v.Minor)
}

// AtLeast reports whether the server implements Redis major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// Version asks the server for its version.
func (s *Server) Version(tb testing.TB) Version {
	tb.Helper()
	info, err := s.Client(tb).Info(context.Background(), "server").Result()
	if err != nil {
		tb.Fatalf("redistest: INFO server: %v", err)
	}
	v, err := ParseVersion(info)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return v
}

// ParseVersion reads the version fields of an INFO server reply.
func ParseVersion(info string) (Version, error) {
	redisVersion := infoField(info, "redis_version")
	parts := strings.SplitN(redisVersion, ".", 3)
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("INFO server has no redis_version of the form major.minor.patch, got %q", redisVersion)
	}
	major, errMajor := strconv.Atoi(parts[0])
	minor, errMinor := strconv.Atoi(parts[1])
	if errMajor != nil || errMinor != nil {
		return Version{}, fmt.Errorf("INFO server redis_version %q is not numeric", redisVersion)
	}
	v := Version{Product: "Redis", Release: redisVersion, Major: major, Minor: minor}
	if valkey := infoField(info, "valkey_version"); valkey != "" {
		v.Product, v.Release = "Valkey", valkey
	}
	return v, nil
}
