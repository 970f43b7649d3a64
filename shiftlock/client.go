// Package shiftlock implements ShiftLock (FAST '25): a reader-writer lock on
// 16-byte entries in a memory node, acquired with one one-sided atomic when
// uncontended, where writers queue MCS-style and the holder hands the lock to
// its successor directly instead of everyone retrying against the entry.
//
// A Client is one node's lock engine: it owns the node's endpoint, its waiter
// slots (rdma.Inbox targets), and routes handover messages. Acquisitions return
// a Guard carrying a fencing token that strictly increases per entry across
// conflicting grants. See docs/shiftlock.md for the protocol and every place
// this code deviates from the paper.
package shiftlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Config tunes a Client. The zero value gives the paper's defaults where the
// paper has one.
type Config struct {
	// Threshold is N, the number of consecutive writer grants after which a
	// writer hands the lock to waiting readers (§3.5; default 16).
	Threshold int
	// PollMin and PollMax bound the interval of READ polling by waiters that
	// have no message to wait for: readers waiting for the epoch to flip and
	// writers waiting for readers to leave. The interval doubles from PollMin
	// to PollMax (defaults 20µs and 1ms). The authors' artifact polls at a
	// fixed interval a little under one round trip (1862 ns at 2.05 µs):
	// PollMin = PollMax = 0.91 x RTT does the same on another fabric.
	PollMin, PollMax time.Duration
	// CheckInterval is how often a waiter checks for failure: whether its
	// entry was recovered (a RelCnt leap) and whether the node it waits on
	// was declared dead (default 100ms).
	CheckInterval time.Duration
	// StaleAfter: a waiter that cannot name a dead blocker asks the memory
	// node for recovery once RelCnt has not moved for this long (default 2s;
	// the paper uses 3 x T_lease). The memory node refuses while any live
	// node still holds the entry, so asking early is safe, only wasteful.
	StaleAfter time.Duration
	// SuccessorTimeout bounds how long a releasing writer waits for the
	// Successor message of a writer that already enqueued behind it
	// (default 1s; the paper uses T_lease). Past it the successor is
	// presumed dead and the lock is left for recovery.
	SuccessorTimeout time.Duration
	// NoHandoverBump skips the RelCnt increment on each writer-to-writer
	// handover, as the authors' artifact does. It saves one atomic per
	// handover but makes writer fencing tokens repeat within a run of
	// handovers and hides progress from failure detection. For measurements
	// only; see docs/shiftlock.md.
	NoHandoverBump bool
	// PipelineBump takes the RelCnt bump of a writer-to-writer handover off
	// the critical path: the Handover is sent at once with the token
	// Algorithm 3 computes (curRel+1), and the bump's FAA completes in the
	// background. RelCnt may then lag behind the holder's token; a closing
	// CAS that finds it so waits and retries, and a run of writers waits
	// for its bumps to land before it lets readers in (their tokens come
	// from RelCnt). Fencing tokens stay strictly increasing. Releases
	// through Guard.BeginRelease (the proxy's batched path) keep the
	// bump on the path, since it rides in a batch anyway. A failed try's
	// entry (TryExclusiveTagged) may show a RelCnt below the holder's
	// token while bumps are in flight.
	PipelineBump bool
	// Trace, if set, is told how long each phase of an acquisition or
	// release took (the items of the paper's Table 2). For measurements:
	// it costs two clock reads per phase.
	Trace func(p Phase, d time.Duration)
	// OwnerTags turns on owner recognition (owner.go): exclusive writers
	// may carry an owner tag, and a writer queued behind a vouched writer
	// with its tag is told so by message, as is a failed try that asks the
	// queue (QueryOwner). The proxy uses it to answer a RedLock client that
	// asks several proxies on one memory node as separate Redis instances
	// would. It costs no memory-node verb: an uncontended acquire and
	// release stay one atomic each (G1).
	OwnerTags bool
	// OwnerAnswerWait bounds how long a tagged writer whose deadline has
	// passed waits for the answer to its last owner question (settle;
	// default OwnerAnswerCap). Only a proxy that died holding the question
	// leaves it unanswered.
	OwnerAnswerWait time.Duration

	Logger *zap.Logger

	// testEarlyReaderRelease is a deliberately broken variant for tests: a
	// reader that gives up while waiting releases at once instead of waiting
	// for its epoch. The mutual-exclusion checker must catch it.
	testEarlyReaderRelease bool
}

func (c *Config) defaults() {
	if c.Threshold <= 0 {
		c.Threshold = 16
	}
	if c.PollMin <= 0 {
		c.PollMin = 20 * time.Microsecond
	}
	if c.PollMax < c.PollMin {
		c.PollMax = time.Millisecond
		if c.PollMax < c.PollMin {
			c.PollMax = c.PollMin
		}
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = 100 * time.Millisecond
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 2 * time.Second
	}
	if c.SuccessorTimeout <= 0 {
		c.SuccessorTimeout = time.Second
	}
	if c.OwnerAnswerWait <= 0 {
		c.OwnerAnswerWait = OwnerAnswerCap
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Errors returned by acquisitions.
var (
	// ErrLost: the entry was reset by recovery, or the memory node's table was
	// lost, while this client believed it held the lock.
	ErrLost = errors.New("shiftlock: lock lost")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("shiftlock: client closed")
	// ErrTooManyReaders: MaxReaders readers already hold or wait for the
	// entry. The reader that found so is not counted.
	ErrTooManyReaders = fmt.Errorf("shiftlock: %d readers already hold or wait for this lock entry, its limit", MaxReaders)
)

// errReset is internal: the entry was recovered while we waited; start over.
var errReset = errors.New("shiftlock: entry was reset while waiting")

// Client is one node's lock engine. It is safe for concurrent use.
type Client struct {
	ep     rdma.Endpoint
	layout rdma.Layout
	cfg    Config
	log    *zap.Logger
	inbox  rdma.Inbox
	owners ownerTable
	holds  holdTable
	rpoll  [64]pollShard
	stats  Stats
	pace   checkPace // of the waiters' failure checks
	closed atomic.Bool
	svc    atomic.Pointer[func(rdma.Message) error] // BindService
	rprobe atomic.Pointer[func(uint64) rdma.Hold]   // SetRangeProbe
	bg     sync.WaitGroup                           // background completions of abandoned waits
}

// NewClient makes ep's node a ShiftLock client: it binds the node's receive
// handler and its recovery probe handler.
func NewClient(ep rdma.Endpoint, cfg Config) *Client {
	cfg.defaults()
	c := &Client{ep: ep, layout: ep.Layout(), cfg: cfg, log: cfg.Logger}
	ep.Bind(c.deliver)
	ep.BindProbe(c.probe)
	return c
}

// probe answers the memory node's probes: about a lock entry from the
// client's own table, about a range tree (rdma.ParseRangeProbe) from the
// handler SetRangeProbe installed. A node without one has no range tree to
// speak of.
func (c *Client) probe(entry uint64) rdma.Hold {
	if _, _, _, ok := rdma.ParseRangeProbe(entry); ok {
		if fn := c.rprobe.Load(); fn != nil {
			return (*fn)(entry)
		}
		return rdma.HoldNone
	}
	return c.holds.probe(entry)
}

// SetRangeProbe installs the handler for the memory node's probes about
// range trees, which share the node's probe channel with lock entries
// (package lockmap serves range locks beside ShiftLock's).
func (c *Client) SetRangeProbe(fn func(entry uint64) rdma.Hold) { c.rprobe.Store(&fn) }

// Endpoint is the client's fabric endpoint.
func (c *Client) Endpoint() rdma.Endpoint { return c.ep }

// Node is the client's NodeID.
func (c *Client) Node() rdma.NodeID { return c.ep.Node() }

// OwnerTags reports whether the client takes part in owner recognition
// (Config.OwnerTags).
func (c *Client) OwnerTags() bool { return c.cfg.OwnerTags }

// Entries is the number of lock entries on the client's memory node.
func (c *Client) Entries() uint64 { return c.layout.LockEntries }

// Stats are the client's protocol counters.
func (c *Client) Stats() *Stats { return &c.stats }

// Abandoning reports whether a wait on entry i that its caller gave up is
// still queued or passing the lock on. While it is, the entry may look held
// although nobody who was answered holds it; an observer that cares (a
// proxy's EXISTS) can wait for it to settle.
func (c *Client) Abandoning(i uint64) bool { return c.holds.abandoning(i) }

// Close waits for background completions of abandoned acquisitions (bounded
// by ctx) and stops accepting new ones. It does not close the endpoint.
func (c *Client) Close(ctx context.Context) error {
	c.closed.Store(true)
	done := make(chan struct{})
	go func() { c.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Read returns the current state of entry i (one READ).
func (c *Client) Read(ctx context.Context, i uint64) (Entry, error) {
	var b [16]byte
	if err := c.ep.Read(ctx, c.layout.EntryAddr(i), b[:]); err != nil {
		return Entry{}, err
	}
	return Entry(rdma.U128From(b[:])), nil
}

func (c *Client) checkEntry(i uint64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if i >= c.layout.LockEntries {
		return fmt.Errorf("shiftlock: entry %d out of range (%d entries)", i, c.layout.LockEntries)
	}
	return nil
}

// send delivers a notification, in-process when both ends are on this node
// (no network for a local handover: docs/shiftlock.md). A notification is part of the
// queue's structure, so the caller's deadline never cuts it short.
//
// A remote send completes in the background: neither a waiter (which must go
// on checking for failures) nor a releasing holder (whose client is waiting
// for its release to be answered) may block on a peer that has stopped
// acknowledging, as a paused process does. A failure is reported through
// failed, and failure detection takes it from there.
func (c *Client) send(ctx context.Context, to Tail, m message, failed func(error)) {
	p := m.encode()
	if to.Node == c.ep.Node() {
		c.stats.LocalSends.Add(1)
		if err := c.deliver(rdma.Message{From: to.Node, To: to.Target, Payload: p}); err != nil && failed != nil {
			failed(err)
		}
		return
	}
	c.stats.RemoteSends.Add(1)
	ctx = context.WithoutCancel(ctx)
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		if err := c.ep.Send(ctx, to.Node, to.Target, p); err != nil && failed != nil {
			failed(err)
		}
	}()
}

// Stats count protocol events on one client.
type Stats struct {
	SharedGrants, ExclusiveGrants atomic.Uint64
	Immediate                     atomic.Uint64 // grants with no wait at all
	Waits                         atomic.Uint64 // acquisitions that had to wait (queued behind a writer, or for readers or an epoch)
	Handovers                     atomic.Uint64 // writer-to-writer handovers sent
	ModeChanges                   atomic.Uint64 // writer-to-readers transfers
	TryFailures                   atomic.Uint64
	LocalSends, RemoteSends       atomic.Uint64
	Abandoned                     atomic.Uint64 // waits given up by the caller, completed in background
	Resets                        atomic.Uint64 // waits restarted because the entry was recovered
	RecoveryRequests              atomic.Uint64
	ChecksSkipped                 atomic.Uint64 // failure checks a polling waiter did not need: RelCnt had moved
	BumpWaits                     atomic.Uint64 // releases that waited for pipelined RelCnt bumps to land (Config.PipelineBump)
	Rechecks                      atomic.Uint64 // grants re-read after a recovery probe found their waiter waiting (Client.enter)
	Lost                          atomic.Uint64
}

// holdTable tracks, per entry, what this node is doing with it, so that the
// memory node's recovery probe gets a truthful answer (docs/recovery-design.md).
// An acquire counts as active from before its first atomic is posted until its
// outcome is known, because until then it may already hold the lock.
type holdTable struct {
	shards [64]holdShard
}

type holdShard struct {
	mu sync.Mutex
	m  map[uint64]holdCount
}

type holdCount struct {
	active, waiting int32
	abandoned       int32 // waits given up by their caller, not yet released
	// probed counts the probes answered "waiting". A waiter notes it when it
	// starts to wait (wait) and compares when it is granted (promote): if a
	// probe came between, the memory node may have reset the entry on the
	// strength of that answer, and the grant's evidence (a Handover sent
	// before the reset, a READ taken before it) may be stale.
	probed      uint32
	frozenUntil time.Time
}

// idleKeep is how many entries a shard may keep at zero (update).
const idleKeep = 8

func (h *holdTable) add(entry uint64, active, waiting int32) { h.update(entry, active, waiting, 0) }

// abandon counts abandoned waits on entry (delta +1 when one is given up,
// -1 once it has passed the lock on).
func (h *holdTable) abandon(entry uint64, delta int32) { h.update(entry, 0, 0, delta) }

// update changes entry's counts; an entry with nothing left (and no freeze
// running) leaves the map, unless the shard is small: deleting a small
// map's last entry makes Go draw a new hash seed, a random read on every
// uncontended release, and a zero entry reads as an absent one everywhere.
// Counts are values, so the uncontended path of every acquire and release
// allocates nothing here.
func (h *holdTable) update(entry uint64, active, waiting, abandoned int32) {
	s := &h.shards[entry%64]
	s.mu.Lock()
	if s.m == nil {
		s.m = map[uint64]holdCount{}
	}
	hc := s.m[entry]
	hc.active += active
	hc.waiting += waiting
	hc.abandoned += abandoned
	if hc.active == 0 && hc.waiting == 0 && hc.abandoned == 0 && len(s.m) > idleKeep && (hc.frozenUntil.IsZero() || !time.Now().Before(hc.frozenUntil)) {
		delete(s.m, entry)
	} else {
		s.m[entry] = hc
	}
	s.mu.Unlock()
}

// wait moves one acquire on entry from acquiring (active: its atomic's
// outcome was unknown) to waiting, and returns the mark promote needs.
func (h *holdTable) wait(entry uint64) (mark uint32) {
	s := &h.shards[entry%64]
	s.mu.Lock()
	hc := s.m[entry] // present: the acquire counted itself active
	hc.active--
	hc.waiting++
	s.m[entry] = hc
	s.mu.Unlock()
	return hc.probed
}

// promote moves a granted waiter from waiting to holding (active), in one
// step with the check that no probe answered "waiting" since mark: from then
// on a probe hears "active" and the memory node cannot reset the entry under
// the grant. If a probe did answer, promote moves nothing and returns the
// new mark and what is left of the freeze that answer started.
func (h *holdTable) promote(entry uint64, mark uint32) (ok bool, now uint32, freeze time.Duration) {
	s := &h.shards[entry%64]
	s.mu.Lock()
	defer s.mu.Unlock()
	hc := s.m[entry] // present: the waiter is counted
	if hc.probed != mark {
		return false, hc.probed, time.Until(hc.frozenUntil)
	}
	hc.active++
	hc.waiting--
	s.m[entry] = hc
	return true, mark, 0
}

func (h *holdTable) abandoning(entry uint64) bool {
	s := &h.shards[entry%64]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[entry].abandoned > 0
}

// probe answers the memory node. Answering "waiting" freezes grants by
// observation on the entry for rdma.ProbeFreeze (docs/recovery-design.md).
func (h *holdTable) probe(entry uint64) rdma.Hold {
	s := &h.shards[entry%64]
	s.mu.Lock()
	defer s.mu.Unlock()
	hc, ok := s.m[entry]
	switch {
	case !ok:
		return rdma.HoldNone
	case hc.active > 0:
		return rdma.HoldActive
	case hc.waiting > 0:
		hc.frozenUntil = time.Now().Add(rdma.ProbeFreeze)
		hc.probed++
		s.m[entry] = hc
		return rdma.HoldWaiting
	}
	return rdma.HoldNone
}

// enter makes a granted waiter on entry (counted waiting since mark, when
// RelCnt was base) the holder. Almost always that is promote's one step.
// If a probe answered "waiting" meanwhile, the memory node may have reset
// the entry, and neither a Handover (its sender has released, so it
// answered "none") nor a READ taken before the reset shows that: enter
// waits out the probe's freeze, by whose end the memory node has reset or
// given up, and READs the entry once. A leap past base is errReset; no leap
// means the grant stands, and promote is tried again against any probe
// since.
func (c *Client) enter(ctx context.Context, entry, base uint64, mark uint32) error {
	for {
		ok, now, freeze := c.holds.promote(entry, mark)
		if ok {
			return nil
		}
		c.stats.Rechecks.Add(1)
		if freeze > 0 {
			t := time.NewTimer(freeze)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		e, err := c.Read(context.Background(), entry)
		if err != nil {
			return err
		}
		if leaped(e.RelCnt(), base) {
			return errReset
		}
		mark = now
	}
}

// frozen is how much longer grants by observation on entry must wait.
func (h *holdTable) frozen(entry uint64) time.Duration {
	s := &h.shards[entry%64]
	s.mu.Lock()
	defer s.mu.Unlock()
	if hc, ok := s.m[entry]; ok {
		return time.Until(hc.frozenUntil)
	}
	return 0
}
