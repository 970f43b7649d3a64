package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrFenced means the memory node declared this node dead. Its verb access is
// revoked and whatever it held is void; it must rejoin under a new NodeID.
var ErrFenced = errors.New("rdma: node was declared dead by its memory node")

// Heartbeat keeps a node alive in its memory node's node table with one-sided
// writes, and publishes its lease horizon: how long, from the heartbeat, any
// grant it has made may still be in force. The memory node's CPU only reads
// the table; it never answers a heartbeat.
//
// Each beat is one batch, one round trip: a Write of (horizon, seq) and a Read
// of the status word, through which the node learns it was fenced.
type Heartbeat struct {
	ep      Endpoint
	horizon func() time.Duration
	fenced  func(error)
	// exact: horizon bounds every grant that relies on a beat, so a beat
	// may publish less than the last (StartExactHeartbeat).
	exact bool

	mu      sync.Mutex // serialises beats so sequence numbers reach memory in order
	seq     uint64
	lastOK  time.Time     // send time of the newest acknowledged beat
	lastHzn time.Duration // horizon it published
	err     error

	// confirmed is a horizon the memory node confirmed saving (Confirm),
	// no more than any horizon published since that confirmation was read:
	// a memory node may lower what it saved once every member publishes
	// less, so an older confirmation of more is worth nothing then. since
	// is the least horizon published since StartConfirm.
	confirmed, since time.Duration

	// beats counts the beats the memory node received: each is one Write
	// and one Read in one round trip, which lets a test or a metric tell
	// liveness traffic from lock traffic in the verb counters.
	beats atomic.Uint64

	stop chan struct{}
	done chan struct{}
}

// StartHeartbeat beats every Layout().HeartbeatInterval. horizon is called
// for each beat; fenced is called once, from the heartbeat goroutine, when the
// memory node has declared the node dead.
func StartHeartbeat(ep Endpoint, horizon func() time.Duration, fenced func(error)) *Heartbeat {
	return startHeartbeat(&Heartbeat{ep: ep, horizon: horizon, fenced: fenced})
}

// StartExactHeartbeat is StartHeartbeat for a caller whose horizon bounds
// every grant in force, and every grant about to rely on a beat, when it is
// called: each beat calls it under the heartbeat's lock, just before it
// publishes, and publishes what it says, less than the last beat if that is
// what it says. A grant that checks its cover through With, under the same
// lock, then sees either a beat computed after it was counted or the newest
// beat published. With StartHeartbeat a beat never publishes less than the
// last acknowledged one promised, so one long grant keeps the horizon up
// until its deadline, released or not, and with it a restarted memory
// node's grace and a dead member's recovery. horizon must not call the
// Heartbeat.
func StartExactHeartbeat(ep Endpoint, horizon func() time.Duration, fenced func(error)) *Heartbeat {
	return startHeartbeat(&Heartbeat{ep: ep, horizon: horizon, fenced: fenced, exact: true})
}

func startHeartbeat(h *Heartbeat) *Heartbeat {
	h.stop, h.done = make(chan struct{}), make(chan struct{})
	h.lastOK = time.Now() // joining counts as the first sign of life
	go h.loop()
	return h
}

func (h *Heartbeat) loop() {
	defer close(h.done)
	iv := h.ep.Layout().HeartbeatInterval
	if iv <= 0 {
		iv = 100 * time.Millisecond
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), iv*2)
		var err error
		if h.exact {
			err = h.Push(ctx, 0) // the horizon is read under the lock
		} else {
			err = h.Push(ctx, h.horizon())
		}
		cancel()
		if errors.Is(err, ErrFenced) {
			if h.fenced != nil {
				h.fenced(err)
			}
			return
		}
	}
}

// Push beats now, publishing horizon (with StartExactHeartbeat, at least
// horizon: what the horizon function says, if more), and returns once the
// memory node has the beat. Call it before granting something that would
// outlive the currently published horizon.
func (h *Heartbeat) Push(ctx context.Context, horizon time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return h.err
	}
	if h.exact {
		horizon = max(horizon, h.horizon())
	} else if keep := time.Until(h.lastOK.Add(h.lastHzn)); keep > horizon {
		// The memory node reads the slot when it sweeps, so it may never
		// see a beat that a later one overwrote; a grant may already rely
		// on that beat. So a beat never publishes less than the last
		// acknowledged one promised: a beat whose horizon was computed
		// before a longer grant's push must not shorten it.
		horizon = keep
	}
	if horizon < 0 {
		horizon = 0
	}
	h.seq++
	var w [16]byte
	binary.LittleEndian.PutUint64(w[0:], uint64((horizon+time.Millisecond-1)/time.Millisecond))
	binary.LittleEndian.PutUint64(w[8:], h.seq)
	var st [8]byte
	slot := h.ep.Layout().NodeSlotAddr(h.ep.Node())
	var b Batch
	b.Write(slot, w[:])
	b.Read(Addr{slot.Region, slot.Offset + SlotStatus}, st[:])
	sent := time.Now()
	if err := h.ep.Post(ctx, &b); err != nil {
		if errors.Is(err, ErrFenced) {
			h.err = err
		}
		return fmt.Errorf("heartbeat: %w", err)
	}
	h.beats.Add(1)
	if err := b.FirstErr(); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if binary.LittleEndian.Uint64(st[:]) == SlotDead {
		h.err = ErrFenced
		return ErrFenced
	}
	h.lastOK = sent
	h.lastHzn = horizon
	h.confirmed = min(h.confirmed, horizon)
	h.since = min(h.since, horizon)
	return nil
}

// StartConfirm begins a confirmation: call it after the beat to be
// confirmed was acknowledged and before reading the memory node's
// confirmation, then pass that to Confirm.
func (h *Heartbeat) StartConfirm() {
	h.mu.Lock()
	h.since = h.lastHzn
	h.mu.Unlock()
}

// Confirm records that the memory node confirmed saving horizon c, as read
// after StartConfirm. What counts is at most the least horizon published
// since StartConfirm.
func (h *Heartbeat) Confirm(c time.Duration) {
	h.mu.Lock()
	h.confirmed = max(h.confirmed, min(c, h.since))
	h.mu.Unlock()
}

// Confirmed is the longest horizon a beat may publish and count on the
// memory node to honour after a restart, without asking it again.
func (h *Heartbeat) Confirmed() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.confirmed
}

// Published is the send time of the newest acknowledged beat and the horizon
// it carried: every grant must end by at.Add(horizon).
func (h *Heartbeat) Published() (at time.Time, horizon time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastOK, h.lastHzn
}

// With calls f with what Published and Confirmed report, under the lock
// that orders beats: no beat is computed or published while f runs. f must
// not call the Heartbeat.
func (h *Heartbeat) With(f func(at time.Time, horizon, confirmed time.Duration)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h.lastOK, h.lastHzn, h.confirmed)
}

// Beats is the number of beats posted successfully, periodic and pushed.
func (h *Heartbeat) Beats() uint64 { return h.beats.Load() }

// LastAck is the send time of the newest acknowledged beat. A node whose
// LastAck is older than its memory node's DeadAfter may already be declared
// dead and must stop granting.
func (h *Heartbeat) LastAck() time.Time {
	at, _ := h.Published()
	return at
}

// Fenced reports whether the memory node declared this node dead.
func (h *Heartbeat) Fenced() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err != nil
}

// Stop ends the beats; the memory node will declare the node dead unless it
// leaves first.
func (h *Heartbeat) Stop() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}
