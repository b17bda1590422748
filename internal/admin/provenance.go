package admin

import (
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/trigger"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// provenance returns where a group's hygiene settings came from, and which
// triggers were refused, as the trigger registry knows them.
func (s *Server) provenance(g liveness.GroupRef) (trigger.GroupView, bool) {
	if s.opts.Provenance == nil {
		return trigger.GroupView{}, false
	}
	return s.opts.Provenance(g)
}

func settingSources(v trigger.GroupView) []*pelwardenv1.SettingSource {
	out := make([]*pelwardenv1.SettingSource, 0, len(v.Sources))
	for _, src := range v.Sources {
		out = append(out, &pelwardenv1.SettingSource{Setting: src.Name, Value: src.Value, Source: src.From})
	}
	return out
}

// describeProvenance fills the provenance fields of a DescribeTarget answer.
func (s *Server) describeProvenance(g liveness.GroupRef, out *pelwardenv1.DescribeTargetResponse) {
	v, ok := s.provenance(g)
	if !ok {
		return
	}
	out.HygieneSources = settingSources(v)
	out.HygieneTriggers = v.Triggers
	out.HygieneConflict = v.Conflict
	for _, r := range v.Refused {
		out.RefusedTriggers = append(out.RefusedTriggers, &pelwardenv1.TriggerRefusal{
			Trigger: r.From, Code: r.Refusal.Code.String(), Key: r.Refusal.Key, Message: r.Refusal.Rule,
		})
	}
}
