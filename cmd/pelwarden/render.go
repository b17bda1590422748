package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pelwarden/pelwarden/internal/clip"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// maxReason bounds the reasons column; -o json has them whole.
const maxReason = 90

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func targetName(redis, stream, group string) string {
	if redis == "" {
		redis = "default"
	}
	return redis + "/" + stream + "/" + group
}

// renderStatus prints each target's consumers, then totals.
func renderStatus(w io.Writer, targets []*pelwardenv1.Target) error {
	var consumers, alive, ghost, degraded, unknown int
	var live, held, heldDegraded, lag int64
	for i, t := range targets {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  lag %d%s  pending %d live, %d held by ghosts, %d by degraded workers (%d unknown)\n",
			targetName(t.GetRedis(), t.GetStream(), t.GetGroup()), t.GetLag(), estimated(t.GetLagEstimated()),
			t.GetLivePending(), t.GetGhostPending(), t.GetDegradedPending(), t.GetUnknownPending())
		switch {
		case t.GetError() != "":
			fmt.Fprintf(w, "  last read failed: %s\n", t.GetError())
		case t.GetStreamMissing():
			fmt.Fprintln(w, "  stream not found")
		case t.GetGroupMissing():
			fmt.Fprintln(w, "  consumer group not found")
		case t.GetNoHeartbeatRecords():
			fmt.Fprintln(w, "  no consumer has a heartbeat record under heartbeatKey: the pattern is probably wrong, so all are Unknown")
		}
		live, held, heldDegraded, lag = live+t.GetLivePending(), held+t.GetGhostPending(), heldDegraded+t.GetDegradedPending(), lag+t.GetLag()
		if len(t.GetConsumers()) == 0 {
			continue
		}
		tw := newTable(w)
		fmt.Fprintln(tw, "  CONSUMER\tVERDICT\tPENDING\tIDLE\tHEARTBEAT\tPOD\tOWNER\tREASONS")
		for _, c := range t.GetConsumers() {
			consumers++
			switch c.GetVerdict() {
			case pelwardenv1.Verdict_VERDICT_ALIVE:
				alive++
			case pelwardenv1.Verdict_VERDICT_GHOST:
				ghost++
			case pelwardenv1.Verdict_VERDICT_DEGRADED:
				degraded++
			default:
				unknown++
			}
			pod := or(c.GetPod(), "-")
			if c.GetSharedName() {
				pod += " (shared name)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", c.GetName(), verdictText(c.GetVerdict()), c.GetPending(),
				millis(c.GetIdleMs()), millis(c.GetHeartbeatAgeMs()), pod, or(c.GetOwner(), "-"),
				clip.String(strings.Join(c.GetReasons(), "; "), maxReason))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\n%d targets, %d consumers: %d alive, %d ghost, %d degraded, %d unknown; pending %d live, %d held by ghosts, %d by degraded workers; lag %d\n",
		len(targets), consumers, alive, ghost, degraded, unknown, live, held, heldDegraded, lag)
	return nil
}

// renderPlans prints each target's plan, then what it adds up to.
func renderPlans(w io.Writer, plans []*pelwardenv1.PlanResponse) error {
	totals := map[string]int64{}
	for i, p := range plans {
		if i > 0 {
			fmt.Fprintln(w)
		}
		t := p.GetTarget()
		fmt.Fprintf(w, "%s  hygiene %s\n", targetName(t.GetRedis(), t.GetStream(), t.GetGroup()), or(p.GetHygiene(), "-"))
		if err := renderSources(w, p.GetHygieneSources()); err != nil {
			return err
		}
		if len(p.GetSteps()) == 0 {
			fmt.Fprintln(w, "  nothing to do")
			continue
		}
		tw := newTable(w)
		fmt.Fprintln(tw, "  CONSUMER\tVERDICT\tACTION\tENTRIES\tDEAD-LETTER\tCLAIM-TO\tREASON")
		for _, st := range p.GetSteps() {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%s\t%s\n", st.GetConsumer(), verdictText(st.GetVerdict()), st.GetAction(),
				st.GetEntries(), st.GetDeadLetterEntries(), or(st.GetClaimTo(), "-"), clip.String(st.GetReason(), maxReason))
			switch st.GetAction() {
			case "none":
			case "delete-consumer":
				totals["delete-consumer"]++
			default:
				totals[st.GetAction()] += st.GetEntries() - st.GetDeadLetterEntries()
				totals["dead-letter"] += st.GetDeadLetterEntries()
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\nwould requeue %d entries, claim %d, dead-letter %d; would delete %d ghost consumer(s)\n",
		totals["requeue"], totals["claim"], totals["dead-letter"], totals["delete-consumer"])
	return nil
}

func renderReclaim(w io.Writer, res *pelwardenv1.ReclaimResponse) error {
	if res.GetDryRun() {
		fmt.Fprintln(w, "dry run: nothing was changed")
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "OUTCOME\tENTRIES")
	keys := make([]string, 0, len(res.GetCounts()))
	for k := range res.GetCounts() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%d\n", k, res.GetCounts()[k])
	}
	if len(res.GetOutcomes()) > 0 {
		fmt.Fprintln(tw, "\nID\tOUTCOME\tDETAIL")
		for _, o := range res.GetOutcomes() {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", o.GetId(), o.GetOutcome(), or(o.GetDetail(), "-"))
		}
	}
	return tw.Flush()
}

func renderFindings(w io.Writer, findings []*pelwardenv1.Finding) error {
	if len(findings) == 0 {
		_, err := fmt.Fprintln(w, "no findings")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "KIND\tTARGET\tCONSUMER\tENTRIES\tDETAIL")
	for _, f := range findings {
		t := f.GetTarget()
		kind := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(f.GetKind().String(), "FINDING_KIND_"), "_", "-"))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", kind, targetName(t.GetRedis(), t.GetStream(), t.GetGroup()),
			or(f.GetConsumer(), "-"), len(f.GetIds()), f.GetDetail())
	}
	return tw.Flush()
}

// printJSONList writes several responses as one JSON array.
func printJSONList[M proto.Message](w io.Writer, ms []M) error {
	parts := make([]string, len(ms))
	for i, m := range ms {
		b, err := marshalJSON(m)
		if err != nil {
			return err
		}
		parts[i] = strings.ReplaceAll(string(b), "\n", "\n  ")
	}
	_, err := fmt.Fprintf(w, "[\n  %s\n]\n", strings.Join(parts, ",\n  "))
	return err
}

func verdictText(v pelwardenv1.Verdict) string {
	switch v {
	case pelwardenv1.Verdict_VERDICT_ALIVE:
		return "Alive"
	case pelwardenv1.Verdict_VERDICT_GHOST:
		return "Ghost"
	case pelwardenv1.Verdict_VERDICT_DEGRADED:
		return "Degraded"
	default:
		return "Unknown"
	}
}

// millis renders a duration in milliseconds the way an operator reads it;
// a negative one is unknown.
func millis(ms int64) string {
	if ms < 0 {
		return "-"
	}
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func estimated(b bool) string {
	if b {
		return " (estimated: NULL in XINFO GROUPS)"
	}
	return ""
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// renderSources prints where each hygiene setting came from.
func renderSources(w io.Writer, sources []*pelwardenv1.SettingSource) error {
	if len(sources) == 0 {
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "  SETTING\tVALUE\tFROM")
	for _, src := range sources {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", src.GetSetting(), or(src.GetValue(), "-"), src.GetSource())
	}
	return tw.Flush()
}

// renderHygiene prints a target's hygiene settings, where they came from,
// and the triggers whose hygiene request the policy refused.
func renderHygiene(w io.Writer, res *pelwardenv1.DescribeTargetResponse) error {
	if res.GetHygiene() == "" && len(res.GetRefusedTriggers()) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nhygiene %s\n", or(res.GetHygiene(), "- (not looked after)"))
	if c := res.GetHygieneConflict(); c != "" {
		fmt.Fprintf(w, "  dry run: %s\n", c)
	}
	if ms := res.GetHygieneActsFromMs(); ms > 0 {
		fmt.Fprintf(w, "  warming up: acts from %s: %s\n", time.UnixMilli(ms).UTC().Format(time.RFC3339), clip.String(res.GetHygieneWarmUp(), 2*maxReason))
	}
	if err := renderSources(w, res.GetHygieneSources()); err != nil {
		return err
	}
	for _, r := range res.GetRefusedTriggers() {
		key := ""
		if r.GetKey() != "" {
			key = " " + r.GetKey() + ":"
		}
		fmt.Fprintf(w, "  refused %s: %s%s %s\n", r.GetTrigger(), r.GetCode(), key, clip.String(r.GetMessage(), 2*maxReason))
	}
	return nil
}
