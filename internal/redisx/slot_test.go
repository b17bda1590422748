package redisx_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redisx"
)

// The expected slots are what CLUSTER KEYSLOT answered on a Redis 7.0
// cluster node, and the check value of CRC-16/XMODEM ("123456789" =
// 0x31C3) the cluster specification gives.
func TestHashSlotMatchesWhatAClusterNodeAnswers(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]int{
		"123456789":            0x31C3,
		"foo":                  12182,
		"somekey":              11058,
		"foo{hash_tag}":        2515,
		"{user1000}.following": 3443,
		"user1000":             3443,
		"foo{}{bar}":           8363,
		"{bar":                 4015,
		"foo{{bar}}zap":        4015,
		"ünïcode":              6051,
		"}{y}":                 12222,
		"":                     0,
	} {
		require.Equal(t, want, redisx.HashSlot(key), "slot of %q", key)
	}
}

func TestSameSlotFollowsHashTags(t *testing.T) {
	t.Parallel()
	require.True(t, redisx.SameSlot("{jobs}", "{jobs}:dead"))
	require.True(t, redisx.SameSlot("jobs", "{jobs}:dead"))
	require.False(t, redisx.SameSlot("jobs", "jobs:dead"))
}

func FuzzHashSlotIsInRangeAndFollowsTheTag(f *testing.F) {
	for _, s := range []string{"jobs", "{jobs}:dead", "{}", "a{b}c{d}", "{{}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		s := redisx.HashSlot(key)
		require.GreaterOrEqual(t, s, 0)
		require.Less(t, s, 16384)
		if key != "" && !strings.ContainsAny(key, "{}") {
			require.Equal(t, s, redisx.HashSlot("head{"+key+"}tail"), "a tag hashes like the bare key")
		}
	})
}
