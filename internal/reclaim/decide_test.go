package reclaim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

var requeueStale = policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: 30 * time.Second, DeleteGhostConsumers: true}

// TestDecideAndExplainFollowTheLoopsRules: Decide is pure; Explain turns
// a step and what executing it did into what Plan shows.
func TestDecideAndExplainFollowTheLoopsRules(t *testing.T) {
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
	degraded := liveness.ConsumerView{Name: "deg", Verdict: liveness.Degraded, Pending: 5, Idle: time.Second, HeartbeatAge: 0,
		Reasons: []liveness.Reason{{Source: liveness.SourceHeartbeat, Detail: "fresh heartbeat at hb:deg says degraded (quota)", Age: -1}}}
	otherDegraded := degraded
	otherDegraded.Name, otherDegraded.HeartbeatAge = "another-deg", -1
	emptyDegraded := degraded
	emptyDegraded.Pending, emptyDegraded.Idle = 0, time.Hour

	claim := requeueStale
	claim.Mode, claim.ClaimFallback = policy.ReclaimClaim, policy.FallbackRequeue
	claimSkip := claim
	claimSkip.ClaimFallback = policy.FallbackSkip
	poison := requeueStale
	poison.MaxDeliveries, poison.DeadLetterStream = 3, "jobs:dead"
	hard := requeueStale
	hard.HardTimeout = 10 * time.Minute
	keep := requeueStale
	keep.DeleteGhostConsumers = false
	dry := requeueStale
	dry.DryRun = true
	off := requeueStale
	off.Mode = policy.ReclaimOff

	type counts = map[redisx.Outcome]int64
	cases := map[string]struct {
		owner  liveness.ConsumerView
		others []liveness.ConsumerView
		h      policy.Hygiene
		did    counts
		want   Explanation
		reason []string
	}{
		"a ghost's stale entries are requeued": {
			owner: ghost, h: requeueStale, did: counts{redisx.Requeued: 7},
			want:   Explanation{Action: Requeue, Entries: 7},
			reason: []string{"ghost (idle:", "7 of its 10 entries have been idle 30s or more", "deleted on a later scan"},
		},
		"claim mode names the live consumer": {
			owner: ghost, others: []liveness.ConsumerView{alive, unknown}, h: claim, did: counts{redisx.Claimed: 10},
			want: Explanation{Action: Claim, Entries: 10, ClaimTo: "live"},
		},
		"claim mode with no live consumer falls back to requeue": {
			owner: ghost, others: []liveness.ConsumerView{unknown}, h: claim, did: counts{redisx.Requeued: 10},
			want: Explanation{Action: Requeue, Entries: 10}, reason: []string{"no consumer is Alive to claim them"},
		},
		"claim mode with no live consumer and fallback skip does nothing": {
			owner: ghost, h: claimSkip,
			want: Explanation{Action: None}, reason: []string{"claimFallback is skip"},
		},
		"entries at maxDeliveries are dead-lettered": {
			owner: ghost, h: poison, did: counts{redisx.Requeued: 3, redisx.DeadLettered: 2},
			want: Explanation{Action: Requeue, Entries: 5, DeadLetter: 2}, reason: []string{"2 have been delivered 3 times and go to jobs:dead"},
		},
		"all entries poison is a dead-letter step": {
			owner: ghost, h: poison, did: counts{redisx.DeadLettered: 5},
			want: Explanation{Action: DeadLetter, Entries: 5, DeadLetter: 5},
		},
		"tombstones are counted apart": {
			owner: ghost, h: requeueStale, did: counts{redisx.Requeued: 4, redisx.Tombstoned: 2},
			want: Explanation{Action: Requeue, Entries: 6, Tombstones: 2}, reason: []string{"2 were deleted from the stream"},
		},
		"a ghost whose entries are not stale yet": {
			owner: ghost, h: requeueStale, did: counts{},
			want: Explanation{Action: None}, reason: []string{"none of its 10 entries has been idle 30s yet"},
		},
		"a ghost whose pod went gives up entries idle since": {
			owner: podGone, h: requeueStale, did: counts{redisx.Requeued: 10},
			want: Explanation{Action: Requeue, Entries: 10}, reason: []string{"its pod went 3s ago"},
		},
		"a degraded owner's stale entries are requeued": {
			owner: degraded, h: requeueStale, did: counts{redisx.Requeued: 2},
			want:   Explanation{Action: Requeue, Entries: 2},
			reason: []string{"degraded (heartbeat: fresh heartbeat at hb:deg says degraded (quota))", "2 of its 5 entries"},
		},
		"a degraded owner's entries are claimed to a live consumer, never another degraded one": {
			owner: degraded, others: []liveness.ConsumerView{otherDegraded, alive}, h: claim, did: counts{redisx.Claimed: 5},
			want: Explanation{Action: Claim, Entries: 5, ClaimTo: "live"},
		},
		"an empty degraded consumer is never deleted": {
			owner: emptyDegraded, h: requeueStale,
			want: Explanation{Action: None, Reason: "holds no entries"},
		},
		"an alive owner keeps its entries": {
			owner: alive, h: requeueStale,
			want: Explanation{Action: None}, reason: []string{"alive", "hardTimeoutSeconds is off"},
		},
		"an alive owner past the hard timeout": {
			owner: alive, h: hard, did: counts{redisx.Requeued: 1},
			want: Explanation{Action: Requeue, Entries: 1}, reason: []string{"idle past hardTimeoutSeconds", "idle 10m0s or more"},
		},
		"an unknown owner is never acted on, hard timeout or not": {
			owner: unknown, h: hard,
			want: Explanation{Action: None}, reason: []string{"Unknown", "never acts"},
		},
		"an empty quiet ghost is deleted": {
			owner: emptyGhost, h: requeueStale, did: counts{redisx.ConsumerDeleted: 1},
			want: Explanation{Action: DeleteConsumer}, reason: []string{"empty PEL"},
		},
		"an empty ghost the delete script finds read again stays": {
			owner: emptyGhost, h: requeueStale, did: counts{redisx.DeleteNotIdle: 1},
			want: Explanation{Action: None}, reason: []string{"delete-not-idle"},
		},
		"an empty ghost whose name was just used waits": {
			owner: justReadGhost, h: requeueStale,
			want: Explanation{Action: None}, reason: []string{"quiet for entryStaleSeconds"},
		},
		"an empty ghost stays with deleteGhostConsumers off": {
			owner: emptyGhost, h: keep,
			want: Explanation{Action: None}, reason: []string{"deleteGhostConsumers is off"},
		},
		"an empty live consumer": {
			owner: liveness.ConsumerView{Name: "idle", Verdict: liveness.Alive}, h: requeueStale,
			want: Explanation{Action: None, Reason: "holds no entries"},
		},
		"dry run says so": {
			owner: ghost, h: dry, did: counts{redisx.Requeued: 10},
			want: Explanation{Action: Requeue, Entries: 10}, reason: []string{"dryRun is on"},
		},
		"reclaim off": {
			owner: ghost, h: off,
			want: Explanation{Action: None, Reason: "reclaim is off"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			snap := &liveness.Snapshot{Consumers: append([]liveness.ConsumerView{tc.owner}, tc.others...)}
			st := Decide(snap, tc.h, now)[0]
			require.Equal(t, tc.owner.Name, st.Owner.Name)
			if st.Action == None {
				require.Nil(t, tc.did, "a step that does nothing is not executed")
			}
			got := Explain(StepResult{Step: st, Counts: tc.did}, tc.h)
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

// TestOneDecisionSpreadsItsClaims: two ghosts' entries in one scan go to
// two live consumers, not both to the one that looked emptiest first.
func TestOneDecisionSpreadsItsClaims(t *testing.T) {
	t.Parallel()
	h := requeueStale
	h.Mode, h.ClaimFallback = policy.ReclaimClaim, policy.FallbackRequeue
	snap := &liveness.Snapshot{Consumers: []liveness.ConsumerView{
		{Name: "g1", Verdict: liveness.Ghost, Pending: 10},
		{Name: "g2", Verdict: liveness.Ghost, Pending: 10},
		{Name: "w1", Verdict: liveness.Alive, HeartbeatAge: -1},
		{Name: "w2", Verdict: liveness.Alive, HeartbeatAge: -1, Pending: 1},
	}}
	steps := Decide(snap, h, time.Now())
	require.Equal(t, "w1", steps[0].ClaimTo, "the emptiest first")
	require.Equal(t, "w2", steps[1].ClaimTo, "w1 has the first ghost's 10 now")
}

// TestOneDecisionSpreadsItsClaimsFreshestFirst: three owners' entries go
// to three live consumers, the freshest heartbeat first, then the freshest
// of those the scan has given nothing yet; never to a degraded or stale
// owner.
func TestOneDecisionSpreadsItsClaimsFreshestFirst(t *testing.T) {
	t.Parallel()
	h := requeueStale
	h.Mode, h.ClaimFallback = policy.ReclaimClaim, policy.FallbackRequeue
	live := func(name string, hb time.Duration) liveness.ConsumerView {
		return liveness.ConsumerView{Name: name, Verdict: liveness.Alive, HeartbeatAge: hb}
	}
	owner := func(name string, v liveness.Verdict) liveness.ConsumerView {
		return liveness.ConsumerView{Name: name, Verdict: v, Pending: 4, HeartbeatAge: -1}
	}
	snap := &liveness.Snapshot{Consumers: []liveness.ConsumerView{owner("deg", liveness.Degraded),
		live("live-a", 0), live("live-b", time.Second), live("live-c", 2*time.Second),
		owner("stale-1", liveness.Ghost), owner("stale-2", liveness.Ghost)}}
	got := map[string]string{}
	for _, st := range Decide(snap, h, time.Now()) {
		if st.Action == Claim {
			got[st.Owner.Name] = st.ClaimTo
		}
	}
	require.Equal(t, map[string]string{"deg": "live-a", "stale-1": "live-b", "stale-2": "live-c"}, got)
}

func TestAnOperatorIsRefusedWhatTheLoopWouldNotTakeWithoutForce(t *testing.T) {
	t.Parallel()
	now := time.Now()
	snap := &liveness.Snapshot{Consumers: []liveness.ConsumerView{
		{Name: "live", Verdict: liveness.Alive, Pending: 3},
		{Name: "odd", Verdict: liveness.Unknown, Pending: 2},
		{Name: "ghost", Verdict: liveness.Ghost, Pending: 2},
	}}
	for _, owner := range []string{"live", "odd", "stranger"} {
		_, err := DecideOperator(snap, owner, requeueStale, now, false, false)
		var refused *Refused
		require.ErrorAs(t, err, &refused, owner)
		st, err := DecideOperator(snap, owner, requeueStale, now, true, false)
		require.NoError(t, err, owner)
		require.Equal(t, requeueStale.EntryStale, st.MinIdle, "force takes entries idle entryStaleSeconds from %s", owner)
	}
	st, err := DecideOperator(snap, "ghost", requeueStale, now, false, true)
	require.NoError(t, err)
	require.Equal(t, Claim, st.Action)
	require.Equal(t, "live", st.ClaimTo)
	_, err = DecideOperator(&liveness.Snapshot{Consumers: snap.Consumers[1:]}, "ghost", requeueStale, now, false, true)
	require.ErrorContains(t, err, "use mode requeue", "claim with nobody alive to take them is refused")
}
