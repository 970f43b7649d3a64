// Package chaos runs fault campaigns against real processes (a memnode,
// several proxies, many clients) and checks the history of what the clients
// experienced: no two conflicting holders while both believed their locks
// valid, fencing tokens that increase per key, and no request left hanging.
package chaos

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Op is one lock as a client experienced it.
type Op struct {
	Client string
	Key    string
	Shared bool
	// Span marks a range lock's span [L, R) of the name Key
	// (LOCK.RANGE.ACQUIRE); a lock without one is the whole key.
	Span  bool
	L, R  uint64
	Fence uint64 // 0: the grant carried none (SET NX); fences are never 0
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

// conflicts reports whether two locks of one key exclude each other: not
// both shared, and, for spans, overlapping.
func (o Op) conflicts(p Op) bool {
	if o.Shared && p.Shared {
		return false
	}
	if o.Span && p.Span {
		return o.L < p.R && p.L < o.R
	}
	return true
}

func (o Op) String() string {
	mode := "exclusive"
	if o.Shared {
		mode = "shared"
	}
	key := o.Key
	if o.Span {
		key = fmt.Sprintf("%s [%d,%d)", o.Key, o.L, o.R)
	}
	return fmt.Sprintf("%s %s %s fence %d held %s..%s", o.Client, key, mode, o.Fence,
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
//
// For range locks, conflicting means overlapping spans of one name, not
// both shared.
func Check(ops []Op) []Violation {
	byKey := map[string][]Op{}
	for _, o := range ops {
		if o.Until().After(o.Granted) {
			byKey[o.Key] = append(byKey[o.Key], o)
		}
	}
	var out []Violation
	for _, os := range byKey {
		if os[0].Span {
			out = append(out, checkSpans(os)...)
		} else {
			out = append(out, checkKey(os)...)
		}
	}
	return out
}

// checkSpans is checkKey for the spans of one range-lock name. Overlaps
// are swept as for keys, with conflicts looking at the spans. Fences are
// checked unit by unit, on the elementary intervals between every span's
// ends: before each grant, every window that ended earlier has raised the
// largest fence seen on each interval it covered, in any mode and
// exclusive; the grant must beat them on every interval of its span.
func checkSpans(ops []Op) []Violation {
	out := overlaps(ops)
	var ends []uint64
	for _, o := range ops {
		ends = append(ends, o.L, o.R)
	}
	slices.Sort(ends)
	ends = slices.Compact(ends)
	cell := func(u uint64) int { return sort.Search(len(ends), func(i int) bool { return ends[i] >= u }) }
	type best struct {
		any, excl       Op
		haveAny, haveEx bool
	}
	cells := make([]best, len(ends))
	byEnd := append([]Op(nil), ops...)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].Until().Before(byEnd[j].Until()) })
	e := 0
	for _, o := range ops {
		for e < len(byEnd) && !byEnd[e].Until().After(o.Granted) {
			p := byEnd[e]
			e++
			for i := cell(p.L); i < cell(p.R); i++ {
				c := &cells[i]
				if !c.haveAny || p.Fence > c.any.Fence {
					c.any, c.haveAny = p, true
				}
				if !p.Shared && (!c.haveEx || p.Fence > c.excl.Fence) {
					c.excl, c.haveEx = p, true
				}
			}
		}
		for i := cell(o.L); i < cell(o.R); i++ {
			c := &cells[i]
			if !o.Shared && c.haveAny && o.Fence <= c.any.Fence {
				out = append(out, Violation{"fence", c.any, o})
				break
			}
			if o.Shared && c.haveEx && o.Fence <= c.excl.Fence {
				out = append(out, Violation{"fence", c.excl, o})
				break
			}
		}
	}
	return out
}

// overlaps sorts ops by grant and sweeps them in that order, keeping the
// windows still open: a conflicting one still open at a grant is an
// overlap.
func overlaps(ops []Op) []Violation {
	var out []Violation
	sort.Slice(ops, func(i, j int) bool { return ops[i].Granted.Before(ops[j].Granted) })
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
	return out
}

func checkKey(ops []Op) []Violation {
	out := overlaps(ops)

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
