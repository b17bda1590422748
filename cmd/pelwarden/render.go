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

// maxReason bounds the one-line texts of the hygiene block; -o json and
// -o yaml have them whole.
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

// statusTotals add up the targets' consumers and entries.
type statusTotals struct {
	consumers, alive, ghost, degraded, unknown int
	live, held, heldDegraded, released, lag    int64
	failed                                     []string
}

func (n *statusTotals) add(t *pelwardenv1.Target) {
	n.live, n.held, n.heldDegraded, n.lag = n.live+t.GetLivePending(), n.held+t.GetGhostPending(), n.heldDegraded+t.GetDegradedPending(), n.lag+t.GetLag()
	n.released += t.GetReleasedPending()
	if t.GetError() != "" {
		n.failed = append(n.failed, targetName(t.GetRedis(), t.GetStream(), t.GetGroup()))
	}
	for _, c := range t.GetConsumers() {
		n.consumers++
		switch c.GetVerdict() {
		case pelwardenv1.Verdict_VERDICT_ALIVE:
			n.alive++
		case pelwardenv1.Verdict_VERDICT_GHOST:
			n.ghost++
		case pelwardenv1.Verdict_VERDICT_DEGRADED:
			n.degraded++
		default:
			n.unknown++
		}
	}
}

// readAge says how old a target's numbers are; a failed read says so, so
// stale numbers are never shown as current.
func readAge(t *pelwardenv1.Target) string {
	age := millis(t.GetSnapshotAgeMs())
	switch {
	case t.GetError() == "":
		return "read " + age + " ago"
	case t.GetSnapshotAgeMs() == 0 && len(t.GetConsumers()) == 0:
		return "NO GOOD READ YET: the numbers are not counts"
	default:
		return "STALE: last good read " + age + " ago"
	}
}

// renderStatus prints each target's consumers, then totals, and returns
// the targets whose latest read failed.
func renderStatus(w io.Writer, targets []*pelwardenv1.Target, f format) ([]string, error) {
	var n statusTotals
	for i, t := range targets {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  lag %d%s  pending %d live, %d held by ghosts, %d by degraded workers (%d unknown)%s  %s\n",
			targetName(t.GetRedis(), t.GetStream(), t.GetGroup()), t.GetLag(), estimated(t.GetLagEstimated()),
			t.GetLivePending(), t.GetGhostPending(), t.GetDegradedPending(), t.GetUnknownPending(), releasedText(t.GetReleasedPending()), readAge(t))
		if f == formatWide {
			fmt.Fprintf(w, "  liveness %s\n", or(t.GetLiveness(), "-"))
		}
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
		n.add(t)
		if len(t.GetConsumers()) == 0 {
			continue
		}
		if err := renderConsumers(w, t.GetConsumers(), f); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(w, "\n%d targets, %d consumers: %d alive, %d ghost, %d degraded, %d unknown; pending %d live, %d held by ghosts, %d by degraded workers%s; lag %d\n",
		len(targets), n.consumers, n.alive, n.ghost, n.degraded, n.unknown, n.live, n.held, n.heldDegraded, releasedText(n.released), n.lag)
	return n.failed, nil
}

// releasedText names the entries released to the group (XNACK), which no
// consumer holds and the scaler counts as work; empty where there are none,
// as before Redis 8.8.
func releasedText(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d released (no owner, counted as work)", n)
}

// renderConsumers is one target's table: every reason, one a line,
// wrapped (whole with -o wide, which adds the time since the last
// successful read).
func renderConsumers(w io.Writer, consumers []*pelwardenv1.Consumer, f format) error {
	tw := newTable(w)
	header := []string{"CONSUMER", "VERDICT", "PENDING", "IDLE"}
	if f == formatWide {
		header = append(header, "INACTIVE")
	}
	fmt.Fprintf(tw, "  %s\tHEARTBEAT\tPOD\tOWNER\tREASONS\n", strings.Join(header, "\t"))
	for _, c := range consumers {
		pod := or(c.GetPod(), "-")
		if c.GetSharedName() {
			pod += " (shared name)"
		}
		cells := []string{c.GetName(), verdictText(c.GetVerdict()), fmt.Sprint(c.GetPending()), millis(c.GetIdleMs())}
		if f == formatWide {
			cells = append(cells, millis(c.GetInactiveMs()))
		}
		cells = append(cells, millis(c.GetHeartbeatAgeMs()), pod, or(c.GetOwner(), "-"))
		printRows(tw, "  ", cells, reasonLines(c.GetReasons(), f))
	}
	return tw.Flush()
}

// renderPlans prints each target's plan, then what it adds up to; each
// reason is wrapped (whole with -o wide, which adds the tombstones).
func renderPlans(w io.Writer, plans []*pelwardenv1.PlanResponse, f format) error {
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
		header := "  CONSUMER\tVERDICT\tACTION\tENTRIES\tDEAD-LETTER\tCLAIM-TO\tREASON"
		if f == formatWide {
			header = "  CONSUMER\tVERDICT\tACTION\tENTRIES\tDEAD-LETTER\tTOMBSTONES\tCLAIM-TO\tREASON"
		}
		fmt.Fprintln(tw, header)
		for _, st := range p.GetSteps() {
			cells := []string{st.GetConsumer(), verdictText(st.GetVerdict()), st.GetAction(), fmt.Sprint(st.GetEntries()), fmt.Sprint(st.GetDeadLetterEntries())}
			if f == formatWide {
				cells = append(cells, fmt.Sprint(st.GetTombstoneEntries()))
			}
			cells = append(cells, or(st.GetClaimTo(), "-"))
			printRows(tw, "  ", cells, reasonLines([]string{st.GetReason()}, f))
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
	released := ""
	if n := totals["release"]; n > 0 {
		released = fmt.Sprintf(", release %d", n)
	}
	fmt.Fprintf(w, "\nwould requeue %d entries, claim %d%s, dead-letter %d; would delete %d ghost consumer(s)\n",
		totals["requeue"], totals["claim"], released, totals["dead-letter"], totals["delete-consumer"])
	return nil
}

// renderReclaim prints the outcomes, and why nothing was taken when
// nothing was.
func renderReclaim(w io.Writer, res *pelwardenv1.ReclaimResponse) error {
	if res.GetDryRun() {
		fmt.Fprintln(w, "dry run: nothing was changed")
	}
	if res.GetNote() != "" {
		fmt.Fprintf(w, "nothing taken: %s\n", res.GetNote())
	}
	if len(res.GetCounts()) == 0 && len(res.GetOutcomes()) == 0 {
		return nil
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

// renderFindings prints a table of the findings, numbered, and each
// one's detail below it, wrapped: a paragraph does not fit in a cell. -o
// wide adds the ids a finding lists.
func renderFindings(w io.Writer, findings []*pelwardenv1.Finding, f format) error {
	if len(findings) == 0 {
		_, err := fmt.Fprintln(w, "no findings")
		return err
	}
	tw := newTable(w)
	header := "#\tKIND\tTARGET\tCONSUMER\tENTRIES"
	if f == formatWide {
		header += "\tIDS"
	}
	fmt.Fprintln(tw, header)
	for i, fd := range findings {
		t := fd.GetTarget()
		kind := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(fd.GetKind().String(), "FINDING_KIND_"), "_", "-"))
		entries := "-"
		if n := max(fd.GetEntries(), int64(len(fd.GetIds()))); n > 0 {
			entries = fmt.Sprint(n)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s", i+1, kind, targetName(t.GetRedis(), t.GetStream(), t.GetGroup()), or(fd.GetConsumer(), "-"), entries)
		if f == formatWide {
			fmt.Fprintf(tw, "\t%s", or(strings.Join(fd.GetIds(), ","), "-"))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, fd := range findings {
		number := fmt.Sprintf("%d. ", i+1)
		indent := strings.Repeat(" ", len(number))
		fmt.Fprintln(w)
		for j, l := range wrap(fd.GetDetail(), 76) {
			if j == 0 {
				fmt.Fprintf(w, "%s%s\n", number, l)
			} else {
				fmt.Fprintf(w, "%s%s\n", indent, l)
			}
		}
	}
	return nil
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
