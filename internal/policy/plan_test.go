package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

func TestPlanStep(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	idleReason := []liveness.Reason{{Source: liveness.SourceIdle, Detail: "no read attempt for longer than ghostIdleSeconds", Age: time.Hour}}
	ghost := liveness.ConsumerView{Name: "ghost", Verdict: liveness.Ghost, Pending: 10, Idle: time.Hour, Reasons: idleReason}
	emptyGhost := ghost
	emptyGhost.Pending = 0
	justReadGhost := emptyGhost
	justReadGhost.Idle = time.Second
	alive := liveness.ConsumerView{Name: "live", Verdict: liveness.Alive, Pending: 3, Idle: time.Second, HeartbeatAge: time.Second}
	unknown := liveness.ConsumerView{Name: "odd", Verdict: liveness.Unknown, Pending: 4}
	podGone := ghost
	podGone.GoneAt = now.Add(-3 * time.Second)
	group := []liveness.ConsumerView{alive, ghost, unknown}
	degraded := liveness.ConsumerView{Name: "deg", Verdict: liveness.Degraded, Pending: 5, Idle: time.Second, HeartbeatAge: 0,
		Reasons: []liveness.Reason{{Source: liveness.SourceHeartbeat, Detail: "fresh heartbeat at hb:deg says degraded (quota)", Age: -1}}}
	otherDegraded := degraded
	otherDegraded.Name, otherDegraded.HeartbeatAge = "another-deg", -1
	emptyDegraded := degraded
	emptyDegraded.Pending, emptyDegraded.Idle = 0, time.Hour

	claim := requeueStale
	claim.Mode, claim.ClaimFallback = ReclaimClaim, FallbackRequeue
	claimSkip := claim
	claimSkip.ClaimFallback = FallbackSkip
	poison := requeueStale
	poison.MaxDeliveries, poison.DeadLetterStream = 3, "jobs:dead"
	hard := requeueStale
	hard.HardTimeout = 10 * time.Minute
	keep := requeueStale
	keep.DeleteGhostConsumers = false
	dry := requeueStale
	dry.DryRun = true
	off := requeueStale
	off.Mode = ReclaimOff

	cases := map[string]struct {
		owner     liveness.ConsumerView
		consumers []liveness.ConsumerView
		h         Hygiene
		stale     Stale
		want      Step
		reason    []string
	}{
		"a ghost's stale entries are requeued": {
			owner: ghost, h: requeueStale, stale: Stale{Entries: 7},
			want:   Step{Action: ActionRequeue, Entries: 7},
			reason: []string{"ghost (idle:", "7 of its 10 entries have been idle 30s or more", "deleted on a later scan"},
		},
		"claim mode names the live consumer": {
			owner: ghost, consumers: group, h: claim, stale: Stale{Entries: 10},
			want: Step{Action: ActionClaim, Entries: 10, ClaimTo: "live"},
		},
		"claim mode with no live consumer falls back to requeue": {
			owner: ghost, consumers: []liveness.ConsumerView{ghost, unknown}, h: claim, stale: Stale{Entries: 10},
			want: Step{Action: ActionRequeue, Entries: 10}, reason: []string{"no consumer is Alive to claim them"},
		},
		"claim mode with no live consumer and fallback skip does nothing": {
			owner: ghost, consumers: []liveness.ConsumerView{ghost}, h: claimSkip, stale: Stale{Entries: 10},
			want: Step{Action: ActionNone}, reason: []string{"claimFallback is skip"},
		},
		"entries at maxDeliveries are dead-lettered": {
			owner: ghost, h: poison, stale: Stale{Entries: 5, AtMaxDeliveries: 2},
			want: Step{Action: ActionRequeue, Entries: 5, DeadLetter: 2}, reason: []string{"at least 2 have been delivered 3 times and go to jobs:dead"},
		},
		"all entries poison is a dead-letter step": {
			owner: ghost, h: poison, stale: Stale{Entries: 5, AtMaxDeliveries: 5},
			want: Step{Action: ActionDeadLetter, Entries: 5, DeadLetter: 5},
		},
		"a ghost whose entries are not stale yet": {
			owner: ghost, h: requeueStale,
			want: Step{Action: ActionNone}, reason: []string{"none of its 10 entries has been idle 30s yet"},
		},
		"a ghost whose pod went gives up entries idle since": {
			owner: podGone, h: requeueStale, stale: Stale{Entries: 10},
			want: Step{Action: ActionRequeue, Entries: 10}, reason: []string{"its pod went 3s ago"},
		},
		"a degraded owner's stale entries are requeued": {
			owner: degraded, h: requeueStale, stale: Stale{Entries: 2},
			want: Step{Action: ActionRequeue, Entries: 2}, reason: []string{"degraded (heartbeat: fresh heartbeat at hb:deg says degraded (quota))", "2 of its 5 entries"},
		},
		"a degraded owner's entries are never claimed to another degraded one": {
			owner: degraded, consumers: []liveness.ConsumerView{degraded, otherDegraded, alive}, h: claim, stale: Stale{Entries: 5},
			want: Step{Action: ActionClaim, Entries: 5, ClaimTo: "live"},
		},
		"an empty degraded consumer is not deleted": {
			owner: emptyDegraded, h: requeueStale,
			want: Step{Action: ActionNone, Reason: "holds no entries"},
		},
		"an alive owner keeps its entries": {
			owner: alive, h: requeueStale,
			want: Step{Action: ActionNone}, reason: []string{"alive", "hardTimeoutSeconds is off"},
		},
		"an alive owner past the hard timeout": {
			owner: alive, h: hard, stale: Stale{Entries: 1},
			want: Step{Action: ActionRequeue, Entries: 1}, reason: []string{"idle past hardTimeoutSeconds", "idle 10m0s or more"},
		},
		"an unknown owner is never acted on, hard timeout or not": {
			owner: unknown, h: hard, stale: Stale{Entries: 4},
			want: Step{Action: ActionNone}, reason: []string{"Unknown", "never acts"},
		},
		"an empty quiet ghost is deleted": {
			owner: emptyGhost, h: requeueStale,
			want: Step{Action: ActionDeleteConsumer}, reason: []string{"empty PEL"},
		},
		"an empty ghost whose name was just used waits": {
			owner: justReadGhost, h: requeueStale,
			want: Step{Action: ActionNone}, reason: []string{"quiet for entryStaleSeconds"},
		},
		"an empty ghost stays with deleteGhostConsumers off": {
			owner: emptyGhost, h: keep,
			want: Step{Action: ActionNone}, reason: []string{"deleteGhostConsumers is off"},
		},
		"an empty live consumer": {
			owner: liveness.ConsumerView{Name: "idle", Verdict: liveness.Alive}, h: requeueStale,
			want: Step{Action: ActionNone, Reason: "holds no entries"},
		},
		"dry run says so": {
			owner: ghost, h: dry, stale: Stale{Entries: 10},
			want: Step{Action: ActionRequeue, Entries: 10}, reason: []string{"dryRun is on"},
		},
		"reclaim off": {
			owner: ghost, h: off, stale: Stale{Entries: 10},
			want: Step{Action: ActionNone, Reason: "reclaim is off"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := PlanStep(tc.owner, tc.consumers, tc.h, now, tc.stale, nil)
			require.NotEmpty(t, got.Reason, "every step says why")
			for _, part := range tc.reason {
				require.Contains(t, got.Reason, part)
			}
			if tc.want.Reason == "" {
				got.Reason = ""
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestOperatorThreshold(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	hard := requeueStale
	hard.HardTimeout = 10 * time.Minute
	ghost := liveness.ConsumerView{Name: "g", Verdict: liveness.Ghost}
	podGone := liveness.ConsumerView{Name: "p", Verdict: liveness.Ghost, GoneAt: now.Add(-3 * time.Second)}
	alive := liveness.ConsumerView{Name: "a", Verdict: liveness.Alive}
	unknown := liveness.ConsumerView{Name: "u", Verdict: liveness.Unknown}
	cases := map[string]struct {
		owner   liveness.ConsumerView
		seen    bool
		h       Hygiene
		force   bool
		want    time.Duration
		refusal string
	}{
		"a ghost, as the loop would":                  {ghost, true, requeueStale, false, 30 * time.Second, ""},
		"a ghost whose pod went, as the loop would":   {podGone, true, requeueStale, false, 3 * time.Second, ""},
		"force changes nothing for a ghost":           {podGone, true, requeueStale, true, 3 * time.Second, ""},
		"an alive owner with a hard timeout":          {alive, true, hard, false, 10 * time.Minute, ""},
		"force lowers a hard timeout to entry stale":  {alive, true, hard, true, 30 * time.Second, ""},
		"an alive owner is refused":                   {alive, true, requeueStale, false, 0, `"a" is Alive`},
		"an alive owner with force":                   {alive, true, requeueStale, true, 30 * time.Second, ""},
		"an unknown owner is refused even with hard":  {unknown, true, hard, false, 0, "Unknown liveness"},
		"an unknown owner with force":                 {unknown, true, requeueStale, true, 30 * time.Second, ""},
		"a name the view has not seen is refused":     {liveness.ConsumerView{Name: "new"}, false, requeueStale, false, 0, "not among the group's consumers"},
		"a name the view has not seen, with force":    {liveness.ConsumerView{Name: "new"}, false, requeueStale, true, 30 * time.Second, ""},
		"an unseen name is not judged by a zero view": {ghost, false, requeueStale, false, 0, "not among"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, refusal := OperatorThreshold(tc.owner, tc.seen, tc.h, now, tc.force)
			require.Equal(t, tc.want, got)
			if tc.refusal == "" {
				require.Empty(t, refusal)
				return
			}
			require.Contains(t, refusal, tc.refusal)
			require.Contains(t, refusal, "force", "a refusal says how to override it")
		})
	}
}

func TestDescribeNamesTheMetadataKeys(t *testing.T) {
	t.Parallel()
	h := Hygiene{Mode: ReclaimClaim, EntryStale: 1500 * time.Millisecond, MaxDeliveries: 5, DeadLetterStream: "jobs:dead",
		DeleteGhostConsumers: true, ClaimFallback: FallbackSkip}
	require.Equal(t, "reclaim=claim entryStaleSeconds=1.5 hardTimeoutSeconds=0 maxDeliveries=5 deadLetterStream=jobs:dead "+
		"deliveryCountField=off deleteGhostConsumers=true deleteOriginal=false claimFallback=skip dryRun=false", h.Describe())
}

// TestPlanSpreadsClaimsAsTheScanDoes: one plan over three owners with one
// tally names three different live consumers, the freshest first.
func TestPlanSpreadsClaimsAsTheScanDoes(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	claim := requeueStale
	claim.Mode, claim.ClaimFallback = ReclaimClaim, FallbackRequeue
	live := func(name string, hb time.Duration) liveness.ConsumerView {
		return liveness.ConsumerView{Name: name, Verdict: liveness.Alive, HeartbeatAge: hb}
	}
	owner := func(name string, v liveness.Verdict) liveness.ConsumerView {
		return liveness.ConsumerView{Name: name, Verdict: v, Pending: 4, HeartbeatAge: -1}
	}
	group := []liveness.ConsumerView{owner("deg", liveness.Degraded), live("live-a", 0), live("live-b", time.Second), live("live-c", 2*time.Second),
		owner("stale-1", liveness.Ghost), owner("stale-2", liveness.Ghost)}
	claims := ClaimTally{}
	var got []string
	for _, o := range []liveness.ConsumerView{group[0], group[4], group[5]} {
		step := PlanStep(o, group, claim, now, Stale{Entries: 4}, claims)
		require.Equal(t, ActionClaim, step.Action, step.Reason)
		got = append(got, step.ClaimTo)
	}
	require.Equal(t, []string{"live-a", "live-b", "live-c"}, got)
	require.Equal(t, ClaimTally{"live-a": 4, "live-b": 4, "live-c": 4}, claims)
}
