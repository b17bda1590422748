package reclaim

import (
	"context"
	"fmt"

	"github.com/pelwarden/pelwarden/internal/redisx"
)

// capable checks a reclaim step against the stream commands of the server
// it runs on, before any script: a release step on a server without XNACK
// is refused, naming the setting, and changes nothing (its entries stay
// with their owner, counted as skipped); a step whose originals are
// deleted uses XACKDEL where the server has it.
func (e *Engine) capable(ctx context.Context, job Job, st Step, res *StepResult) (Step, error) {
	if st.Action != Release && !job.Hygiene.DeleteOriginal {
		return st, nil
	}
	caps, err := e.capabilities(ctx, job)
	if err != nil {
		return st, err
	}
	st.ackDel = job.Hygiene.DeleteOriginal && caps.AckDel
	if st.Action == Release && !caps.Release {
		n := max(st.Owner.Pending, 1)
		res.add(redisx.ReleaseUnsupported, n)
		if !job.DryRun {
			e.metrics.skipped.WithLabelValues(job.Target.Labels(string(redisx.ReleaseUnsupported))...).Add(float64(n))
		}
		return Step{Action: None}, fmt.Errorf("reclaim: release needs XNACK (Redis 8.8, Valkey 9.2), which the server serving %s does not know: "+
			"nothing was given back from %q; set reclaim to requeue or claim for this group", job.Target, st.Owner.Name)
	}
	return st, nil
}

// capabilities are those of the server serving job's stream.
func (e *Engine) capabilities(ctx context.Context, job Job) (redisx.Capabilities, error) {
	if e.opts.Servers != nil {
		return e.opts.Servers.Capabilities(ctx, job.Target.Conn, job.Target.Stream)
	}
	node, err := redisx.NodeForKey(ctx, job.Client, job.Target.Stream)
	if err != nil {
		return redisx.Capabilities{}, err
	}
	return redisx.ProbeCapabilities(ctx, node)
}

// ackDelRefused tells Servers that a script found XACKDEL refused, so the
// next steps ask for XACK and XDEL at once.
func (e *Engine) ackDelRefused(ctx context.Context, job Job, r redisx.Result) {
	if r.AckDelRefused && e.opts.Servers != nil {
		e.opts.Servers.WithoutAckDel(ctx, job.Target.Conn, job.Target.Stream)
		e.opts.Log.Warn("XACKDEL was refused (grant the connection's user +xackdel); acknowledging and deleting with XACK and XDEL",
			"target", job.Target.String())
	}
}
