package lockmap

import (
	"context"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// State says where a key is held.
type State uint8

func (s State) String() string {
	return [...]string{"free", "held", "held-elsewhere"}[s]
}

// Holder describes one hold of a key through this proxy.
type Holder struct {
	Token  string
	Mode   shiftlock.Mode
	Fence  uint64
	TTL    time.Duration // remaining, > 0; 0 = no TTL
	Shadow bool          // the lock itself is held through another proxy
}

// Info is what the proxy knows about a key.
type Info struct {
	Key     string
	State   State
	Holders []Holder
	Domain  string
	Entry   uint64
	Lock    shiftlock.Entry // the entry as read now (only read when not held here)
	Lost    error           // the lease covering this key's memory node is gone
}

// Lookup reports key's holders here, and reads the entry when there are
// none, so that a key held through another proxy is not reported free.
func (m *Map) Lookup(ctx context.Context, key string) (Info, error) {
	return m.lookup(ctx, false, key)
}

func (m *Map) lookup(ctx context.Context, onLoop bool, key string) (Info, error) {
	d, e := m.Where(key)
	info := Info{Key: key, Domain: d.Name, Entry: e}
	if d.Lease != nil {
		info.Lost = d.Lease.Valid()
	}
	now := time.Now()
	s := m.shard(key)
	s.mu.Lock()
	cur, reaped := s.current(key)
	for _, h := range cur {
		var ttl time.Duration
		if !h.deadline.IsZero() {
			// current read the clock no earlier than now, so h is in
			// force at now, and ttl > 0 stays apart from "no TTL".
			ttl = max(h.deadline.Sub(now), 1)
		}
		info.Holders = append(info.Holders, Holder{Token: h.token, Mode: h.mode, Fence: h.fence, TTL: ttl, Shadow: h.shadow()})
	}
	s.mu.Unlock()
	m.reaped(reaped)
	if len(info.Holders) > 0 {
		info.State = HeldHere
		return info, nil
	}
	if m.heldExclusivelyHere(d, e) && !m.heldForOthers(d, e) {
		return info, nil // another key of ours owns the entry: this one is free
	}
	if onLoop && !rdma.IsInline(d.Client.Endpoint()) {
		return info, ErrWouldBlock
	}
	ent, err := d.Client.Read(ctx, e)
	passing := func() bool { return d.Client.Abandoning(e) || m.counts.get(d, e).releasing > 0 }
	if err == nil && !ent.Free() && passing() && onLoop {
		return info, ErrWouldBlock
	}
	// A wait of ours that its client gave up, or a release of ours, may hold
	// the entry for a moment while it passes the lock on: that is nobody's
	// hold, so let it settle (briefly: it may also be queued behind a real
	// holder, or hand the lock to one).
	for settle := time.Now().Add(abandonSettle); err == nil && !ent.Free() && passing() && time.Now().Before(settle); {
		time.Sleep(100 * time.Microsecond)
		ent, err = d.Client.Read(ctx, e)
	}
	if err != nil {
		return info, err
	}
	info.Lock = ent
	if !ent.Free() {
		info.State = HeldElsewhere
	}
	return info, nil
}

// abandonSettle bounds how long Lookup waits for an abandoned wait of this
// proxy to pass on an entry that looks held.
const abandonSettle = 50 * time.Millisecond
