// Package chaos runs fault campaigns against real processes (a memnode,
// several proxies, many clients) and checks the history of what the clients
// experienced: no two conflicting holders while both believed their locks
// valid, fencing tokens that increase per key, and no request left hanging.
package chaos

import (
	"fmt"
	"sort"
	"time"
)

// Op is one lock as a client experienced it.
type Op struct {
	Client string
	Key    string
	Shared bool
	Fence  uint64 // 0: the grant carried none (SET NX); fences are never 0
	// Sent is when the acquire was sent. The client counts its TTL from
	// here (it cannot know when the proxy granted), as Redis clients do.
	Sent time.Time
	// Granted is when the grant reached the client.
	Granted time.Time
	// Released is when the client sent its release, or gave the lock up.
	Released time.Time
	TTL      time.Duration
}

// Until is the end of the window in which the client believed it held the
// lock: its release, or its TTL counted from the request, whichever first.
func (o Op) Until() time.Time {
	end := o.Released
	if o.TTL > 0 {
		if ttlEnd := o.Sent.Add(o.TTL); ttlEnd.Before(end) {
			end = ttlEnd
		}
	}
	return end
}

func (o Op) conflicts(p Op) bool { return !(o.Shared && p.Shared) }

func (o Op) String() string {
	mode := "exclusive"
	if o.Shared {
		mode = "shared"
	}
	return fmt.Sprintf("%s %s %s fence %d held %s..%s", o.Client, o.Key, mode, o.Fence,
		o.Granted.Format("15:04:05.000000"), o.Until().Format("15:04:05.000000"))
}

// Violation is a broken guarantee, with the operations that show it.
type Violation struct {
	Kind string // "overlap" or "fence"
	A, B Op
}

func (v Violation) String() string { return fmt.Sprintf("%s: %v | %v", v.Kind, v.A, v.B) }

// Check returns every violation in a history:
//
//   - overlap: two conflicting holders of one key whose validity windows
//     ([Granted, Until]) intersect, i.e. both believed they held the lock at
//     the same instant;
//   - fence: two conflicting holders where one's window ended before the
//     other was granted, yet the later one's fence is not larger. Fences must
//     order conflicting grants as real time does.
func Check(ops []Op) []Violation {
	byKey := map[string][]Op{}
	for _, o := range ops {
		if o.Until().After(o.Granted) {
			byKey[o.Key] = append(byKey[o.Key], o)
		}
	}
	var out []Violation
	for _, os := range byKey {
		out = append(out, checkKey(os)...)
	}
	return out
}

func checkKey(ops []Op) []Violation {
	var out []Violation
	sort.Slice(ops, func(i, j int) bool { return ops[i].Granted.Before(ops[j].Granted) })

	// Overlaps: sweep in grant order, keeping the windows still open.
	var open []Op
	for _, o := range ops {
		kept := open[:0]
		for _, p := range open {
			if p.Until().After(o.Granted) {
				kept = append(kept, p)
				if p.conflicts(o) {
					out = append(out, Violation{"overlap", p, o})
				}
			}
		}
		open = append(kept, o)
	}

	// Fences: walk grants in order; before each, fold in every window that
	// ended before it, remembering the largest fence of any mode and the
	// largest exclusive fence. An exclusive grant must beat both; a shared
	// grant must beat the exclusive one.
	byEnd := append([]Op(nil), ops...)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].Until().Before(byEnd[j].Until()) })
	var maxAny, maxExcl Op
	haveAny, haveExcl := false, false
	e := 0
	for _, o := range ops {
		for e < len(byEnd) && !byEnd[e].Until().After(o.Granted) {
			p := byEnd[e]
			e++
			if p.Fence == 0 {
				continue // no fencing token (SET NX): nothing to order
			}
			if !haveAny || p.Fence > maxAny.Fence {
				maxAny, haveAny = p, true
			}
			if !p.Shared && (!haveExcl || p.Fence > maxExcl.Fence) {
				maxExcl, haveExcl = p, true
			}
		}
		switch {
		case o.Fence == 0:
		case !o.Shared && haveAny && o.Fence <= maxAny.Fence:
			out = append(out, Violation{"fence", maxAny, o})
		case o.Shared && haveExcl && o.Fence <= maxExcl.Fence:
			out = append(out, Violation{"fence", maxExcl, o})
		}
	}
	return out
}
