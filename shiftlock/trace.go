package shiftlock

import "time"

// Phase is one item of the latency breakdown of ShiftLock §4.6 (Table 2).
type Phase uint8

const (
	// PhaseWriterIA is a writer's initial atomic: the enqueuing CAS.
	PhaseWriterIA Phase = iota
	// PhaseWriterNP is posting the Successor notification to the
	// predecessor.
	PhaseWriterNP
	// PhaseWriterWP is waiting for the predecessor's handover.
	PhaseWriterWP
	// PhaseWriterWR is waiting for the readers ahead to leave.
	PhaseWriterWR
	// PhaseReaderIA is a reader's initial atomic: its FAA on RdrCnt.
	PhaseReaderIA
	// PhaseReaderWW is a reader waiting for the writers ahead (its epoch).
	PhaseReaderWW
	// PhaseReleaseIA is a release's atomic.
	PhaseReleaseIA
	// PhaseReleaseNS is posting the Handover or ModeChanged notification
	// to the successor.
	PhaseReleaseNS
	// PhaseWriterRT and PhaseReaderRT are a lock's retries, or its polls
	// for its turn, after the initial atomic, backoff included (Table 2's
	// RT). The retrying and ticket baselines report them; ShiftLock's own
	// waits are WP, WR and WW.
	PhaseWriterRT
	PhaseReaderRT
	// NumPhases counts the phases.
	NumPhases
)

var phaseNames = [NumPhases]string{"W-IA", "W-NP", "W-WP", "W-WR", "R-IA", "R-WW", "Rel-IA", "Rel-NS", "W-RT", "R-RT"}

func (p Phase) String() string {
	if p < NumPhases {
		return phaseNames[p]
	}
	return "phase?"
}

// traceStart returns the start of a traced phase, or the zero time when
// nothing traces.
func (c *Client) traceStart() time.Time {
	if c.cfg.Trace == nil {
		return time.Time{}
	}
	return time.Now()
}

// traced reports the phase that began at t0 (from traceStart).
func (c *Client) traced(p Phase, t0 time.Time) {
	if c.cfg.Trace != nil && !t0.IsZero() {
		c.cfg.Trace(p, time.Since(t0))
	}
}
