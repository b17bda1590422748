package liveness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestIdleBefore72CannotJudgeAConsumerThatHoldsEntries: where idle counts
// from the last read that delivered entries (Redis before 7.2), a worker
// polling an empty stream while it works on the entry it holds looks as
// idle as a dead one. Idle alone then judges such a holder Unknown, with a
// reason that says why; a consumer holding nothing, and every consumer on
// 7.2+, are judged as before; the idle reason names what the server counts.
func TestIdleBefore72CannotJudgeAConsumerThatHoldsEntries(t *testing.T) {
	t.Parallel()
	withPod := idleSpec()
	withPod.Kubernetes = true
	cases := map[string]struct {
		spec      Spec
		ev        Evidence
		want      Verdict
		undecided bool
		reasons   []string
	}{
		"before 7.2, holding an entry, idle past ghostIdle: Unknown": {
			spec: idleSpec(), ev: Evidence{Listed: true, Seen: 61 * time.Second, Inactive: -1, IdleFromDeliveries: true, Pending: 1},
			want: Unknown, undecided: true,
			reasons: []string{"last read that delivered entries", "not judged by idle alone", "holds 1"},
		},
		"before 7.2, holding nothing, idle past ghostIdle: Ghost (nothing to take)": {
			spec: idleSpec(), ev: Evidence{Listed: true, Seen: 61 * time.Second, Inactive: -1, IdleFromDeliveries: true},
			want: Ghost, reasons: []string{"last read that delivered entries", "past ghostIdle"},
		},
		"before 7.2, holding an entry, a delivering read within ghostIdle: Alive": {
			spec: idleSpec(), ev: Evidence{Listed: true, Seen: 59 * time.Second, Inactive: -1, IdleFromDeliveries: true, Pending: 1},
			want: Alive, reasons: []string{"last read that delivered entries"},
		},
		"before 7.2, holding an entry, no pod of that name: Unknown": {
			spec: withPod, ev: Evidence{Listed: true, Seen: 61 * time.Second, Inactive: -1, IdleFromDeliveries: true, Pending: 1, Pod: Pod{State: PodNone}},
			want: Unknown, undecided: true, reasons: []string{"not judged by idle alone"},
		},
		"before 7.2, holding an entry, where the operator says workers never read while holding: Ghost": {
			spec: idleSpec(), ev: Evidence{Listed: true, Seen: 61 * time.Second, Inactive: -1, IdleFromDeliveries: true, IdleJudgesHolders: true, Pending: 1},
			want: Ghost, reasons: []string{"last read that delivered entries", "past ghostIdle"},
		},
		"7.2+, holding an entry, idle past ghostIdle: Ghost": {
			spec: idleSpec(), ev: Evidence{Listed: true, Seen: 61 * time.Second, Inactive: 61 * time.Second, Pending: 1},
			want: Ghost, reasons: []string{"last read attempt", "past ghostIdle"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := Judge(c.spec, c.ev)
			require.Equal(t, c.want, j.Verdict, ReasonsString(j.Reasons))
			require.Equal(t, c.undecided, j.IdleUndecided)
			for _, r := range c.reasons {
				require.Contains(t, ReasonsString(j.Reasons), r)
			}
			if c.ev.IdleFromDeliveries {
				require.NotContains(t, ReasonsString(j.Reasons), "last read attempt", "before 7.2 idle is not since the last attempt")
			}
		})
	}
}
