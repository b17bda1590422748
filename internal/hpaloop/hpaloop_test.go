package hpaloop

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplicaSecondsHoldsEachCountUntilTheNextChange(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		changes []Change
		end     float64
		want    float64
	}{
		"one count the whole time":              {[]Change{{0, 3}}, 10, 30},
		"1, then 3 from 2 s":                    {[]Change{{0, 1}, {2, 3}}, 10, 2 + 24},
		"HPA steps 1, 5, 10, 17":                {[]Change{{0, 1}, {2, 5}, {17, 10}, {32, 17}}, 40, 2 + 75 + 150 + 136},
		"a change after the end counts nothing": {[]Change{{0, 2}, {12, 9}}, 10, 20},
		"nothing known before the first change": {[]Change{{4, 2}}, 10, 12},
		"no changes":                            {nil, 10, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tc.want, ReplicaSeconds(tc.changes, tc.end), 1e-9)
		})
	}
}

func TestARunReadsBackAsItWasWritten(t *testing.T) {
	t.Parallel()
	run := Run{Date: "2026-11-27", CPUs: 2, Kubernetes: "v1.34.4", Target: 3, Scenarios: []Scenario{{
		Name: "ghosts", Seconds: 40, Sides: []Side{{Trigger: "external", Changes: []Change{{0, 1}, {2.5, 3}}, ReplicaSeconds: 115}},
	}}}
	path := filepath.Join(t.TempDir(), "run.json")
	require.NoError(t, Write(path, run))
	got, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, run, got)
}
