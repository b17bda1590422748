package main

import "fmt"

// releasePrefix names the release comparison, which runs on a server with
// XNACK only.
const releasePrefix = "Release/pel="

// releaseRows compare, on one server with XNACK, pelwarden's guarded
// release with its guarded requeue and a raw XAUTOCLAIM loop over the same
// ghost PEL.
func releaseRows(l *lookup, n string) []Row {
	pre := releasePrefix + n + "/"
	release := func() Figure { return rate(l.get(pre+"pelwarden-guarded-release", "entries/s"), "entries/s") }
	load := fmt.Sprintf("%s-entry ghost PEL, Redis with XNACK", count(float64(atoi(n))))
	return []Row{
		l.row(Row{What: "give back a ghost's PEL: pelwarden guarded release (XNACK, checked per entry, no copy)", Workload: load,
			Pelwarden: release(), Against: "pelwarden guarded requeue on the same server",
			Baseline: ptr(rate(l.get(pre+"pelwarden-guarded-requeue", "entries/s"), "entries/s"))}),
		l.row(Row{What: "give back a ghost's PEL: pelwarden guarded release", Workload: load,
			Pelwarden: release(), Against: "raw `XAUTOCLAIM ... COUNT 1000` loop on the same server",
			Baseline: ptr(rate(l.get(pre+"xautoclaim-count-1000", "entries/s"), "entries/s"))}),
	}
}
