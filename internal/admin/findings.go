package admin

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/pelwarden/pelwarden/internal/findings"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/rpcstatus"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// maxSample bounds the MONITOR sample a caller may ask for: MONITOR costs
// the Redis server on every command it runs meanwhile.
const maxSample = 60 * time.Second

// Findings checks one group, or every registered one, on a fresh read.
func (s *Server) Findings(ctx context.Context, req *pelwardenv1.FindingsRequest) (*pelwardenv1.FindingsResponse, error) {
	if req.GetMinDeliveries() < 0 {
		return nil, invalid("min_deliveries", "must be 0 (the target's maxDeliveries, or %d) or more, got %d", findings.DefaultMinDeliveries, req.GetMinDeliveries())
	}
	sample := time.Duration(req.GetSampleMs()) * time.Millisecond
	if req.GetSampleMs() < 0 || sample > maxSample {
		return nil, invalid("sample_ms", "must be from 0 (no MONITOR sample) to %d, got %d", maxSample.Milliseconds(), req.GetSampleMs())
	}
	groups, err := s.findingGroups(req.GetTarget())
	if err != nil {
		return nil, err
	}
	release, err := s.heavyCall("Findings")
	if err != nil {
		return nil, err
	}
	defer release()
	out := &pelwardenv1.FindingsResponse{}
	for _, g := range groups {
		lt, snap, err := s.fresh(ctx, g)
		if err != nil {
			return nil, err
		}
		c, err := s.client(g)
		if err != nil {
			return nil, err
		}
		in := findings.Input{
			Snapshot: snap, Client: c, MinDeliveries: s.minDeliveries(g, req.GetMinDeliveries()),
			Sample: sample, MaxScan: findings.DefaultMaxScan,
		}
		// Without hygiene settings, Deregister still requeues with the defaults.
		h, _ := s.settings(g)
		in.CarryField, in.DeadLetter = h.DeliveryCountField, h.MaxDeliveries > 0
		if s.opts.Readers != nil {
			if r, ok := s.opts.Readers(g); ok {
				in.Readers = &r
			}
		}
		fs, err := findings.Detect(ctx, in)
		if err != nil {
			return nil, rpcstatus.Of(err, g)
		}
		out.Findings = append(out.Findings, findings.ToProto(lt, fs)...)
	}
	return out, nil
}

// findingGroups is the request's group, or every registered one in order.
func (s *Server) findingGroups(ref *pelwardenv1.TargetRef) ([]liveness.GroupRef, error) {
	if ref != nil {
		g, err := checkTarget(ref, s.opts.Conns.Names())
		if err != nil {
			return nil, err
		}
		return []liveness.GroupRef{g}, nil
	}
	seen := map[liveness.GroupRef]bool{}
	var out []liveness.GroupRef
	for _, l := range s.opts.View.Latest() {
		g := l.Target.GroupRef
		if !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b liveness.GroupRef) int {
		return cmp.Or(cmp.Compare(a.Conn, b.Conn), cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Group, b.Group))
	})
	return out, nil
}

// minDeliveries resolves the bouncing threshold: the request's, else the
// group's maxDeliveries, else the default.
func (s *Server) minDeliveries(g liveness.GroupRef, asked int64) int64 {
	if asked > 0 {
		return asked
	}
	if h, ok := s.settings(g); ok && h.MaxDeliveries > 0 {
		return h.MaxDeliveries
	}
	return findings.DefaultMinDeliveries
}
