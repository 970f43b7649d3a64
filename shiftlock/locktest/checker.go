// Package locktest checks reader-writer locks for mutual exclusion, fencing
// and starvation by running many clients against them. ShiftLock, every
// baseline and the proxy are held to the same checker.
package locktest

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Checker records who is inside each critical section and fails on the first
// overlap that a reader-writer lock forbids. It is safe for concurrent use.
type Checker struct {
	entries []entryState
	// StarveBound, if non-zero, is the most exclusive grants a reader may
	// see between asking and being granted.
	StarveBound uint64
	// NoTokens skips the fencing-token checks (for locks without tokens).
	NoTokens bool

	violations atomic.Uint64
	mu         sync.Mutex
	first      []string
}

type entryState struct {
	// state is -1 with a writer inside, n > 0 with n readers inside.
	state atomic.Int64
	// exclusive grants so far; readers read it when they ask and when they
	// are granted, for the starvation bound.
	excl atomic.Uint64

	mu       sync.Mutex
	maxToken uint64 // largest token granted so far
	lastExcl uint64 // token of the latest exclusive grant
	anyExcl  bool
	grants   uint64
}

// NewChecker checks n entries.
func NewChecker(n int) *Checker { return &Checker{entries: make([]entryState, n)} }

func (c *Checker) fail(format string, args ...any) {
	c.violations.Add(1)
	c.mu.Lock()
	if len(c.first) < 10 {
		c.first = append(c.first, fmt.Sprintf(format, args...))
	}
	c.mu.Unlock()
}

// Violations is the number of violations seen.
func (c *Checker) Violations() uint64 { return c.violations.Load() }

// Report describes the first violations.
func (c *Checker) Report() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.first...)
}

// Ask is called before requesting a lock; it returns a ticket for Enter.
func (c *Checker) Ask(entry uint64) uint64 { return c.entries[entry].excl.Load() }

// Enter is called right after a grant, before the critical section.
func (c *Checker) Enter(entry uint64, shared bool, token, ticket uint64) {
	e := &c.entries[entry]
	if shared {
		for {
			s := e.state.Load()
			if s < 0 {
				c.fail("entry %d: reader entered while a writer is inside", entry)
				break
			}
			if e.state.CompareAndSwap(s, s+1) {
				break
			}
		}
		if c.StarveBound > 0 {
			if n := e.excl.Load() - ticket; n > c.StarveBound {
				c.fail("entry %d: reader waited through %d exclusive grants (bound %d)", entry, n, c.StarveBound)
			}
		}
	} else {
		if s := e.state.Swap(-1); s != 0 {
			c.fail("entry %d: writer entered with state %d (want 0)", entry, s)
		}
		e.excl.Add(1)
	}
	if c.NoTokens {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.grants++
	switch {
	case !shared && e.grants > 1 && token <= e.maxToken:
		c.fail("entry %d: exclusive token %d not above every earlier token (%d)", entry, token, e.maxToken)
	case shared && e.anyExcl && token <= e.lastExcl:
		c.fail("entry %d: shared token %d not above the last exclusive token %d", entry, token, e.lastExcl)
	}
	if token > e.maxToken {
		e.maxToken = token
	}
	if !shared {
		e.lastExcl, e.anyExcl = token, true
	}
}

// Exit is called at the end of the critical section, before the release.
func (c *Checker) Exit(entry uint64, shared bool) {
	e := &c.entries[entry]
	if shared {
		if s := e.state.Add(-1); s < 0 {
			c.fail("entry %d: reader left with state %d", entry, s)
		}
		return
	}
	if s := e.state.Swap(0); s != -1 {
		c.fail("entry %d: writer left with state %d (want -1)", entry, s)
	}
}
