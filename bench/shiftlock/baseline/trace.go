package baseline

import (
	"time"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Trace, when set in a baseline's config, is told how long each item of
// ShiftLock's Table 2 took: the initial atomic (IA), the retries or polls
// until the grant (RT, reported as zero when the initial atomic won), and
// the release's atomic. The authors' artifact times the same items and
// averages them over every acquisition, zeros included. For measurements:
// it costs two clock reads per item.
type Trace func(p shiftlock.Phase, d time.Duration)

func (t Trace) start() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

func (t Trace) done(p shiftlock.Phase, t0 time.Time) {
	if t != nil {
		t(p, time.Since(t0))
	}
}

func (t Trace) zero(p shiftlock.Phase) {
	if t != nil {
		t(p, 0)
	}
}

// phasesOf are the IA and RT items of an acquisition in mode m.
func phasesOf(m shiftlock.Mode) (ia, rt shiftlock.Phase) {
	if m == shiftlock.Shared {
		return shiftlock.PhaseReaderIA, shiftlock.PhaseReaderRT
	}
	return shiftlock.PhaseWriterIA, shiftlock.PhaseWriterRT
}
