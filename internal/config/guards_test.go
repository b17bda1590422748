package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
)

func TestValidateRefusesWhatWouldRoundToZeroOrCollide(t *testing.T) {
	t.Parallel()
	target := func(kv ...string) []map[string]string {
		md := map[string]string{"stream": "s", "consumerGroup": "g", "reclaim": "requeue"}
		for i := 0; i+1 < len(kv); i += 2 {
			md[kv[i]] = kv[i+1]
		}
		return []map[string]string{md}
	}
	sameToken := writeFile(t, "token", "the-same-token-0123456789")
	tests := map[string]struct {
		mutate func(c *config.Config)
		want   string
	}{
		"a scan interval of 1ns": {func(c *config.Config) { c.Hygiene.ScanInterval = time.Nanosecond },
			`hygiene.scanInterval: must be at least 1ms, such as 10s, got "1ns"`},
		"a read timeout under a millisecond": {func(c *config.Config) { c.Redis[0].ReadTimeout = 999 * time.Microsecond },
			`redis[0].readTimeout: must be at least 1ms`},
		"a target's stale time that rounds to zero": {func(c *config.Config) { c.Hygiene.Targets = target("entryStaleSeconds", "1e-9") },
			`hygiene.targets[0].entryStaleSeconds: must be a number of seconds from 0.001 (1ms)`},
		"a carry field that is pelwarden's marker": {func(c *config.Config) { c.Hygiene.Targets = target("deliveryCountField", "pelwarden-carried") },
			`hygiene.targets[0].deliveryCountField: must not be a field pelwarden writes itself`},
		"a worker token that is the operator's": {func(c *config.Config) {
			c.Admin.TokenFile, c.Admin.WorkerTokenFile = sameToken, sameToken
		}, `admin.workerTokenFile: must hold a token other than admin.tokenFile's`},
		"an unreadable worker token file": {func(c *config.Config) { c.Admin.WorkerTokenFile = "/nonexistent/worker-token" },
			`admin.workerTokenFile: must name a readable file holding the workers' bearer token`},
		"a scoped worker token that is the operator's": {func(c *config.Config) {
			c.Admin.TokenFile = sameToken
			c.Admin.WorkerTokens = []config.WorkerToken{{TokenFile: sameToken, Streams: []string{"jobs*"}}}
		}, `admin.workerTokens[0].tokenFile: must hold a token other than admin.tokenFile's`},
		"two scoped worker tokens that are one": {func(c *config.Config) {
			c.Admin.WorkerTokens = []config.WorkerToken{{TokenFile: sameToken, Streams: []string{"jobs*"}}, {TokenFile: sameToken, Streams: []string{"mail"}}}
		}, `admin.workerTokens[1].tokenFile: must hold a token other than admin.workerTokens[0].tokenFile's: each token has one scope`},
		"a scoped worker token without streams": {func(c *config.Config) {
			c.Admin.WorkerTokens = []config.WorkerToken{{TokenFile: sameToken}}
		}, `admin.workerTokens[0].streams: must list at least one name or glob`},
		"a scoped worker token with a broken glob": {func(c *config.Config) {
			c.Admin.WorkerTokens = []config.WorkerToken{{TokenFile: sameToken, Streams: []string{"jobs["}}}
		}, `admin.workerTokens[0].streams[0]: must be a name or a path.Match glob`},
		"a scoped worker token without a file": {func(c *config.Config) {
			c.Admin.WorkerTokens = []config.WorkerToken{{Streams: []string{"jobs"}}}
		}, `admin.workerTokens[0].tokenFile: is required`},
		"a worker identity prefix that is no URI": {func(c *config.Config) { c.Admin.WorkerIdentityPrefix = "worker-" },
			`admin.workerIdentityPrefix: must be the start of a URI SAN`},
		"a carry field that a dead-letter record writes": {func(c *config.Config) { c.Hygiene.Targets = target("deliveryCountField", "pelwarden-origin-id") },
			`hygiene.targets[0].deliveryCountField: must not be a field pelwarden writes itself`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			require.ErrorContains(t, err, tt.want)
			var cfgErr *config.Error
			require.ErrorAs(t, err, &cfgErr)
		})
	}
}
