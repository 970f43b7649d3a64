// Package memnode is the memory node: it registers the lock table, the era
// counters and the node table, and serves the control path (join, leave,
// liveness, recovery). Its CPU never takes part in acquiring or releasing a
// lock; fabrics execute one-sided verbs on its regions directly.
package memnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Config sizes a memory node and sets its timing. The zero Config is usable:
// every field has a default.
type Config struct {
	// Entries is the number of 16-byte lock-table entries (default 1<<20).
	Entries uint64
	// Eras is the number of era counters entries are spread over (default 64).
	Eras uint64
	// MaxNodes bounds NodeIDs (default 4096, at most 65535).
	MaxNodes int
	// MaxNodesPerHost bounds the NodeIDs that members joining from one
	// host (rdma.JoinRequest.From) hold at once: live members, and the IDs
	// of dead or departed ones still kept out of circulation. A proxy
	// needs one per memory node, and one more for each recent rejoin;
	// without a bound, one host that joins over and over (a bug, or anyone
	// who has the fabric secret) holds every ID and no other proxy can
	// join. Default DefaultMaxNodesPerHost; in-process members are not
	// counted.
	MaxNodesPerHost int
	// RangeBytes sizes RegionRanges, where range-lock trees live (package
	// rangelock); 0 registers no such region.
	RangeBytes uint64
	// RangeTreeBytes is the size of one tree: RegionRanges is a pool of
	// RangeBytes / RangeTreeBytes trees, one per range-lock name in use
	// (ranges.go). 0: the whole region is one tree.
	RangeTreeBytes uint64
	// HeartbeatInterval is how often members heartbeat (default 100ms).
	HeartbeatInterval time.Duration
	// DeadAfter is how long a member may stay silent before it is declared
	// dead and fenced (default 1s).
	DeadAfter time.Duration
	// ClockDrift is the relative clock-rate drift tolerated when turning a
	// member's lease horizon into a local deadline (default 1e-3, ten times
	// the paper's 1e-4 to allow for loaded, unsynchronised hosts).
	ClockDrift float64
	// ProbeTimeout bounds each probe of a member during recovery (default 500ms).
	ProbeTimeout time.Duration
	// PaperRecovery follows ShiftLock §3.6 literally: a recovery request with
	// the current era resets a non-free entry at once, trusting the paper's
	// lease assumption (no holder keeps a lock past T_lease). It is for
	// microbenchmarks with microsecond critical sections (lockbench
	// -fail-rate); the proxy, whose clients hold locks for seconds, needs
	// the default policy that probes live members first.
	PaperRecovery bool
	// Generation and RelBase are set by the restart logic (see Open); a
	// fresh in-memory node leaves them zero.
	Generation uint64
	RelBase    uint64
	// GraceUntil: no joins are accepted before this instant (restart grace).
	GraceUntil time.Time
	// MaxLease caps the lease horizon members may publish (default 10m):
	// it is the longest TTL a proxy may grant, and bounds the restart grace.
	MaxLease time.Duration
	// Solo: the node's only member shares its process (a proxy's embedded
	// memory node), so both die together, and the next start owes the
	// previous one only its horizons, without DeadAfter on top.
	Solo bool

	// Store keeps the state a later generation needs (set by Open, or by
	// package ha for a memory node whose state lives in etcd); nil: a
	// table that nothing outlives.
	Store StateStore
	// Valid, when set, tells whether this node may still serve (package
	// ha: its etcd lease's validity). It is checked on every frame, join
	// and recovery, so that a process that wakes from a pause past its
	// validity serves nothing before its keeper has deposed it.
	Valid func() bool

	// Alloc, when set, provides every region's memory: size bytes, zeroed,
	// as 8-byte words. A fabric that hands the regions to an RDMA device
	// (rdma/verbs) allocates them outside Go's heap and registers them.
	Alloc func(id rdma.RegionID, size uint64) []uint64

	Logger *zap.Logger
}

// region allocates one region, on Alloc's memory if configured.
func (c *Config) region(id rdma.RegionID, name string, size uint64) *rdma.Memory {
	if c.Alloc == nil {
		return rdma.NewMemory(id, name, size)
	}
	return rdma.NewMemoryOn(id, name, c.Alloc(id, size))
}

func (c *Config) defaults() {
	if c.Entries == 0 {
		c.Entries = 1 << 20
	}
	if c.Eras == 0 {
		c.Eras = 64
	}
	if c.MaxNodes <= 0 {
		c.MaxNodes = 4096
	}
	if c.MaxNodes > 65535 {
		c.MaxNodes = 65535
	}
	if c.MaxNodesPerHost <= 0 {
		c.MaxNodesPerHost = DefaultMaxNodesPerHost
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 100 * time.Millisecond
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = time.Second
	}
	if c.ClockDrift <= 0 {
		c.ClockDrift = 1e-3
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = 500 * time.Millisecond
	}
	if c.Generation == 0 {
		c.Generation = 1
	}
	if c.MaxLease <= 0 {
		c.MaxLease = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// DefaultMaxNodesPerHost is Config.MaxNodesPerHost's default: room for a
// few proxies on one host and their rejoins within a quarantine, while a
// host that joins in a loop takes at most 1/64 of the default 4096 IDs.
const DefaultMaxNodesPerHost = 64

type nodeState uint32

const (
	stateFree nodeState = iota
	stateAlive
	stateDead // declared dead or left; fenced
)

type member struct {
	id       rdma.NodeID
	name     string
	from     string // JoinRequest.From
	addr     string
	joined   time.Time
	lastSeq  uint64
	lastMs   uint64 // horizon (ms) of the last heartbeat
	lastSeen time.Time
	horizon  time.Time // local deadline by which all its grants have ended
}

type tomb struct {
	id      rdma.NodeID
	from    string
	at      time.Time
	horizon time.Time
}

// Server is a memory node. It implements rdma.Host.
type Server struct {
	cfg  Config
	log  *zap.Logger
	ctrs rdma.Counters

	locks, eras, nodes *rdma.Memory
	ranges             *rdma.Memory // nil without RangeBytes
	rng                *rangePool   // the trees of ranges, and the names bound to them

	state []atomic.Uint32 // nodeState by NodeID; read on every verb by Admit

	mu      sync.Mutex
	members map[rdma.NodeID]*member
	tombs   []tomb // recently dead or departed members
	next    rdma.NodeID
	prober  rdma.Prober

	eraMu    []sync.Mutex // one recovery at a time per era counter
	lastScan time.Time

	// The saver goroutine's view of the horizon confirmations: the value
	// last written to every member's SlotConfirmed, and when the saved
	// horizon was last lowered.
	slotMs    uint64
	lastLower time.Time

	stats Stats

	deposed atomic.Pointer[string] // why this node may no longer serve, once set

	stop chan struct{}
	done chan struct{}
}

// Stats are counts of control-path events, for metrics and tests.
type Stats struct {
	Joins, Leaves, Deaths                      atomic.Uint64
	JoinsRefusedPerHost                        atomic.Uint64 // MaxNodesPerHost reached
	Recoveries, RecoveriesStale, RecoveriesRef atomic.Uint64
	// Range-lock names: binds granted, binds refused because every tree
	// was bound, and trees repaired after a user died or asked.
	RangeBinds, RangeFull, RangeRepairs atomic.Uint64
}

// New creates a memory node and starts its liveness monitor. Close stops it.
func New(cfg Config) *Server {
	cfg.defaults()
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		locks:   cfg.region(rdma.RegionLocks, "locks", cfg.Entries*16),
		eras:    cfg.region(rdma.RegionEras, "eras", (cfg.Eras+1)/2*16),
		nodes:   cfg.region(rdma.RegionNodes, "nodes", uint64(cfg.MaxNodes+1)*rdma.NodeSlotSize),
		state:   make([]atomic.Uint32, cfg.MaxNodes+1),
		members: map[rdma.NodeID]*member{},
		next:    1,
		eraMu:   make([]sync.Mutex, cfg.Eras),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if cfg.RangeBytes > 0 {
		// Mapped outside the heap unless a fabric provides the memory: the
		// pool is large and mostly untouched, and in the heap it would
		// raise the collector's goal by its size.
		size := (cfg.RangeBytes + 15) / 16 * 16
		var err error
		if cfg.Alloc != nil {
			s.ranges = cfg.region(rdma.RegionRanges, "ranges", size)
		} else if s.ranges, err = rdma.NewMappedMemory(rdma.RegionRanges, "ranges", size); err != nil {
			s.log.Warn("range trees in the heap", zap.Error(err))
			s.ranges = rdma.NewMemory(rdma.RegionRanges, "ranges", size)
		}
		s.rng = newRangePool(s, cfg.RangeTreeBytes, cfg.RangeBytes)
	}
	if cfg.RelBase != 0 {
		var b [8]byte
		putU64(b[:], cfg.RelBase)
		for i := uint64(0); i < cfg.Entries; i++ {
			_ = s.locks.Write(i*16+8, b[:])
		}
	}
	go s.monitor()
	return s
}

// Close stops the liveness monitor, and releases the state store if it
// holds something (a state directory's lock).
func (s *Server) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.persistLast(time.Now())
	if c, ok := s.cfg.Store.(io.Closer); ok {
		_ = c.Close()
	}
}

// Config returns the effective configuration.
func (s *Server) Config() Config { return s.cfg }

// Stats returns the control-path counters.
func (s *Server) Stats() *Stats { return &s.stats }

func (s *Server) Region(id rdma.RegionID) *rdma.Memory {
	switch id {
	case rdma.RegionLocks:
		return s.locks
	case rdma.RegionEras:
		return s.eras
	case rdma.RegionNodes:
		return s.nodes
	case rdma.RegionRanges:
		if s.ranges != nil {
			return s.ranges
		}
	}
	return nil
}

func (s *Server) Counters() *rdma.Counters { return &s.ctrs }

func (s *Server) SetProber(p rdma.Prober) {
	s.mu.Lock()
	s.prober = p
	s.mu.Unlock()
}

func (s *Server) layout() rdma.Layout {
	return rdma.Layout{
		Generation:        s.cfg.Generation,
		Regions:           s.regionInfos(),
		LockEntries:       s.cfg.Entries,
		EraCount:          s.cfg.Eras,
		HeartbeatInterval: s.cfg.HeartbeatInterval,
		DeadAfter:         s.cfg.DeadAfter,
		MaxLease:          s.cfg.MaxLease,
		Persistent:        s.cfg.Store != nil,
	}
}

// Depose stops this memory node from serving for good: every verb and every
// join is refused from now on. A memory node whose state lives in etcd calls
// it when it can no longer be sure it is the shard's active node, so that a
// successor's table is the only one anyone can grant on.
func (s *Server) Depose(why string) {
	if s.deposed.CompareAndSwap(nil, &why) {
		s.log.Warn("memory node deposed: refusing every verb", zap.String("why", why))
	}
}

// stopped says why this node may not serve, or "": deposed, or past the
// validity Config.Valid reports (which deposes it on the spot).
func (s *Server) stopped() string {
	if why := s.deposed.Load(); why != nil {
		return *why
	}
	if v := s.cfg.Valid; v != nil && !v() {
		s.Depose("its lease ran out")
		return *s.deposed.Load()
	}
	return ""
}

func (s *Server) regionInfos() []rdma.RegionInfo {
	rs := []rdma.RegionInfo{s.locks.Info(), s.eras.Info(), s.nodes.Info()}
	if s.ranges != nil {
		rs = append(rs, s.ranges.Info())
	}
	return rs
}

// Admit fails for nodes that are not live members: their access is revoked.
func (s *Server) Admit(n rdma.NodeID) error {
	if why := s.stopped(); why != "" {
		return fmt.Errorf("%w: memory node deposed: %s", rdma.ErrUnreachable, why)
	}
	if int(n) < len(s.state) {
		switch nodeState(s.state[n].Load()) {
		case stateAlive:
			return nil
		case stateDead:
			return fmt.Errorf("%w: %w: node %d", rdma.ErrUnreachable, rdma.ErrFenced, n)
		}
	}
	return fmt.Errorf("%w: node %d is not a member of this memory node", rdma.ErrUnreachable, n)
}

// Join admits a node under a fresh NodeID. IDs of dead or departed nodes are
// not reused while they may still appear in lock entries or in flight.
func (s *Server) Join(req rdma.JoinRequest) (rdma.JoinReply, error) {
	now := time.Now()
	if why := s.stopped(); why != "" {
		return rdma.JoinReply{}, fmt.Errorf("%w: memory node deposed: %s", rdma.ErrUnavailable, why)
	}
	if wait := s.cfg.GraceUntil.Sub(now); wait > 0 {
		return rdma.JoinReply{}, fmt.Errorf("%w: restart grace, retry in %v", rdma.ErrUnavailable, wait.Round(time.Millisecond))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.hostRoom(req.From, now); err != nil {
		s.stats.JoinsRefusedPerHost.Add(1)
		return rdma.JoinReply{}, err
	}
	id, err := s.allocID(now)
	if err != nil {
		return rdma.JoinReply{}, err
	}
	slot := rdma.NodeSlotSize * uint64(id)
	_ = s.nodes.Write(slot, make([]byte, rdma.NodeSlotSize))
	m := &member{id: id, name: req.Name, from: req.From, addr: req.Addr, joined: now, lastSeen: now, horizon: now}
	s.members[id] = m
	s.state[id].Store(uint32(stateAlive))
	s.stats.Joins.Add(1)
	s.log.Info("node joined", zap.Uint16("node", uint16(id)), zap.String("name", req.Name), zap.String("addr", req.Addr))
	return rdma.JoinReply{Node: id, Layout: s.layout(), Peers: s.peersLocked()}, nil
}

// quarantine is how long a dead node's ID stays out of circulation.
func (s *Server) quarantine() time.Duration { return 10 * s.cfg.DeadAfter }

// held says whether t's ID is still out of circulation.
func (s *Server) held(t tomb, now time.Time) bool {
	return now.Sub(t.at) < s.quarantine() || now.Before(t.horizon)
}

// hostRoom fails if members from host hold MaxNodesPerHost IDs already,
// live or held after they ended. The error is ErrUnavailable: held IDs
// come back, so a proxy retrying its join gets in once its host's old
// memberships have run out.
func (s *Server) hostRoom(host string, now time.Time) error {
	if host == "" {
		return nil
	}
	n := 0
	for _, m := range s.members {
		if m.from == host {
			n++
		}
	}
	for _, t := range s.tombs {
		if t.from == host && s.held(t, now) {
			n++
		}
	}
	if n >= s.cfg.MaxNodesPerHost {
		return fmt.Errorf("%w: members from %s hold %d node IDs, the most one host may (max_nodes_per_host); the IDs of ended memberships come back after their quarantine",
			rdma.ErrUnavailable, host, n)
	}
	return nil
}

func (s *Server) allocID(now time.Time) (rdma.NodeID, error) {
	inTomb := map[rdma.NodeID]bool{}
	for _, t := range s.tombs {
		if s.held(t, now) {
			inTomb[t.id] = true
		}
	}
	for tries := 0; tries < s.cfg.MaxNodes; tries++ {
		id := s.next
		s.next++
		if int(s.next) > s.cfg.MaxNodes {
			s.next = 1
		}
		if _, live := s.members[id]; !live && !inTomb[id] {
			return id, nil
		}
	}
	return 0, fmt.Errorf("%w: no free node IDs (max %d)", rdma.ErrUnavailable, s.cfg.MaxNodes)
}

// Leave removes a node that has released everything it held.
func (s *Server) Leave(n rdma.NodeID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.members[n]
	if !ok {
		return
	}
	// A member may leave right after a beat that pushed its horizon, before
	// a sweep saw it, and a proxy that lost its membership leaves while its
	// clients still believe their locks: the tomb must carry that horizon.
	s.observe(m)
	s.bury(m, time.Now(), "left")
	s.stats.Leaves.Add(1)
}

// bury fences m and remembers until when its grants may still be valid.
func (s *Server) bury(m *member, now time.Time, why string) {
	delete(s.members, m.id)
	s.state[m.id].Store(uint32(stateDead))
	var b [8]byte
	putU64(b[:], rdma.SlotDead)
	_ = s.nodes.Write(rdma.NodeSlotSize*uint64(m.id)+rdma.SlotStatus, b[:])
	s.tombs = append(s.tombs, tomb{id: m.id, from: m.from, at: now, horizon: m.horizon})
	if s.rng != nil {
		s.rng.died(m.id, m.horizon)
	}
	s.log.Info("node removed", zap.Uint16("node", uint16(m.id)), zap.String("name", m.name), zap.String("why", why),
		zap.Duration("horizon_in", time.Until(m.horizon).Round(time.Millisecond)))
}

func (s *Server) Peers() []rdma.Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peersLocked()
}

func (s *Server) peersLocked() []rdma.Peer {
	ps := make([]rdma.Peer, 0, len(s.members))
	for _, m := range s.members {
		ps = append(ps, rdma.Peer{Node: m.id, Addr: m.addr})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Node < ps[j].Node })
	return ps
}

// Members returns the live members' IDs, for tests and INFO.
func (s *Server) Members() []rdma.NodeID {
	ps := s.Peers()
	ids := make([]rdma.NodeID, len(ps))
	for i, p := range ps {
		ids[i] = p.Node
	}
	return ids
}

// monitor turns heartbeats in the node table into liveness: a member whose
// sequence has not moved for DeadAfter is declared dead and fenced.
func (s *Server) monitor() {
	defer close(s.done)
	iv := s.cfg.HeartbeatInterval / 2
	if iv < time.Millisecond {
		iv = time.Millisecond
	}
	// Saving goes through etcd, and a write to a member that died can take
	// a lease's length; sweeps, which declare deaths and read the horizons
	// tombs must carry, go on meanwhile.
	saves := make(chan struct{}, 1)
	saved := make(chan struct{})
	go s.saver(saves, saved)
	defer func() { <-saved }()
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			// Not the tick's time: a sweep that runs late (a loaded
			// host) must not date what it sees to when it was due.
			s.sweep(time.Now())
			select {
			case saves <- struct{}{}:
			default: // the saver has one waiting already
			}
		}
	}
}

// saver persists after every sweep, looking at the members itself.
func (s *Server) saver(saves <-chan struct{}, saved chan<- struct{}) {
	defer close(saved)
	for {
		select {
		case <-s.stop:
			return
		case <-saves:
			s.persist(time.Now())
		}
	}
}

// sweep declares the silent members dead.
func (s *Server) sweep(now time.Time) {
	s.mu.Lock()
	for _, m := range s.members {
		s.observe(m)
		if now.Sub(m.lastSeen) > s.cfg.DeadAfter {
			s.stats.Deaths.Add(1)
			s.bury(m, now, fmt.Sprintf("no heartbeat for %v", now.Sub(m.lastSeen).Round(time.Millisecond)))
		}
	}
	kept := s.tombs[:0]
	for _, t := range s.tombs {
		if now.Sub(t.at) < s.quarantine() || now.Before(t.horizon) {
			kept = append(kept, t)
		}
	}
	s.tombs = kept
	s.mu.Unlock()
}

// Lowering the saved horizon is an fsync (or an etcd write); it is done at
// most once per lowerEvery, and only by at least lowerMin or to nothing
// (else a horizon lowered to less than lowerMin, which two passes that
// observe the same target in one millisecond can do, stays saved for good).
const (
	lowerEvery = time.Second
	lowerMinMs = 1000
)

// persist keeps the saved horizon (State.MaxHorizonMs) a bound on how long
// any grant made under this node may still be in force, from whenever a
// next generation reads it, and confirms horizons to members, who rely on a
// horizon only once it is confirmed (lockmap.Lease). It also saves the
// RelCnt high-water mark every relScanEvery.
//
// The rules, which docs/reliability.md argues in full:
//   - the saved horizon is at least every value in any member's
//     SlotConfirmed, at every instant: a member may rely on a confirmation
//     for any beat it makes later, and a restart comes after that beat;
//   - it is raised before members are told (save, then confirm);
//   - it is lowered only to a target observed after every slot already
//     holds no more than that target, so that a member that read an older,
//     higher confirmation has its beat seen by that observation.
//
// So the saved horizon follows the members' horizons down once their grants
// have run out, and a long TTL used once does not lengthen every later
// restart.
func (s *Server) persist(now time.Time) { s.save(now, false) }

// persistLast is the save a closing memory node makes, once its sweeps
// and saves have stopped. With no member left, each one that left had its
// last beat observed as it did (Leave), and that beat counted the grants
// still in force and none to come (lockmap.Lease.Retire): the tombs bound
// everything a next generation must wait for, and the saved horizon comes
// down to them at once. Before, it stayed at the room the beats had kept
// for the next grant, and a proxy stopped cleanly with nothing held had its
// next start on the state directory serve nothing for a TTL. With members
// left it is an ordinary save: they may rely on what was confirmed.
func (s *Server) persistLast(now time.Time) { s.save(now, true) }

// save is persist; last is persistLast.
func (s *Server) save(now time.Time, last bool) {
	st := s.cfg.Store
	if st == nil {
		return
	}
	target := s.horizonTarget(now)
	if last {
		s.mu.Lock()
		last = len(s.members) == 0
		s.mu.Unlock()
	}
	cur := st.Get()
	hwm := cur.RelHighWater
	if now.Sub(s.lastScan) >= relScanEvery {
		s.lastScan = now
		hwm = s.scanRelCnt()
	} else if s.rng != nil {
		// A word per range tree: cheap enough for every pass, and a
		// repair may move a tree's fence far at once.
		hwm = max(hwm, s.rng.maxFence())
	}
	saveHzn := cur.MaxHorizonMs
	switch {
	case target > saveHzn, last:
		saveHzn = target
	case (target+lowerMinMs <= saveHzn || target == 0 && saveHzn > 0) && s.slotMs <= target && now.Sub(s.lastLower) >= lowerEvery:
		saveHzn = target
		s.lastLower = now
	}
	if saveHzn != cur.MaxHorizonMs || hwm > cur.RelHighWater {
		err := st.Update(func(x *State) bool {
			changed := x.MaxHorizonMs != saveHzn
			x.MaxHorizonMs = saveHzn
			if hwm > x.RelHighWater {
				x.RelHighWater, changed = hwm, true
			}
			return changed
		})
		if err != nil {
			s.log.Error("saving state failed; horizons stay unconfirmed", zap.Error(err))
			return
		}
	}
	// Every member's published horizon is at most target, and target is
	// saved (or less than what is): confirm that much, no more, so that the
	// saved horizon can come down to it later.
	conf := min(st.Get().MaxHorizonMs, target)
	var b [8]byte
	putU64(b[:], conf)
	s.mu.Lock()
	for id := range s.members {
		_ = s.nodes.Write(rdma.NodeSlotSize*uint64(id)+rdma.SlotConfirmed, b[:])
	}
	s.mu.Unlock()
	s.slotMs = conf
}

// horizonTarget observes every member and returns, in milliseconds, what a
// next generation would have to wait for if this node died now: the latest
// horizon of any live or recently departed member, from now, and at least
// every horizon a member publishes, which it may rely on once confirmed.
func (s *Server) horizonTarget(now time.Time) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last time.Time
	var maxMs uint64
	for _, m := range s.members {
		if ms := s.observe(m); ms > maxMs {
			maxMs = ms
		}
		if m.horizon.After(last) {
			last = m.horizon
		}
	}
	for _, t := range s.tombs {
		if t.horizon.After(last) {
			last = t.horizon
		}
	}
	if d := last.Sub(now); d > 0 {
		maxMs = max(maxMs, uint64((d+time.Millisecond-1)/time.Millisecond))
	}
	return maxMs
}

// relScanEvery is how often persist scans the table for its largest RelCnt.
// The next generation starts a recovery leap (2^40) above the mark saved
// last, and releases alone cannot grow an entry's RelCnt by 2^40 in years
// (recoveries save the mark before they leap), so the scan only needs to
// keep the mark from falling behind by that much. It reads every entry (16
// MB for a million): once a second, it was 5% of an embedded proxy's CPU
// on a hot key.
const relScanEvery = 10 * time.Second

// scanRelCnt is the largest RelCnt in the table, or fence of a range tree:
// the next generation starts both above it.
func (s *Server) scanRelCnt() uint64 {
	m, _ := s.locks.MaxWord(8, 16) // RelCnt is an entry's second word
	if s.rng != nil {
		m = max(m, s.rng.maxFence())
	}
	return m
}

// observe reads m's slot. The sequence is read before the horizon: the node
// writes the horizon first, so a new sequence implies its horizon is visible.
//
// A new beat is dated when it was read, with the clock read after the slot:
// the member sent it no later, and its grants end by then plus the horizon.
// A time taken before the read (a sweep's start, a late tick's) could
// predate the beat and end its horizon early, a repair or a recovery going
// ahead while the member's clients may still believe their locks.
func (s *Server) observe(m *member) uint64 {
	base := rdma.NodeSlotSize * uint64(m.id)
	seq, _ := s.nodes.Load8(base + rdma.SlotSeq)
	if seq == m.lastSeq {
		return m.lastMs
	}
	ms, _ := s.nodes.Load8(base + rdma.SlotHorizon)
	now := time.Now()
	m.lastSeq = seq
	m.lastSeen = now
	if limit := uint64((rdma.MaxHorizon(s.cfg.MaxLease, s.cfg.DeadAfter) + time.Millisecond - 1) / time.Millisecond); ms > limit {
		// No proxy publishes more (proxies refuse TTLs past MaxLease); a
		// member that does must not stall recovery, or the next restart
		// grace, past what MaxLease allows.
		ms = limit
	}
	m.lastMs = ms
	// The newest beat bounds every grant of the member, those that relied
	// on an earlier beat included: a member's beat never promises less
	// than its last one unless its horizon counts every grant in force
	// (rdma.StartExactHeartbeat). So the horizon follows it down, and a
	// released long lock no longer holds up a recovery.
	d := time.Duration(float64(time.Duration(ms)*time.Millisecond) * (1 + s.cfg.ClockDrift))
	m.horizon = now.Add(d)
	return ms
}

// Recover performs an era-guarded reset of a lock entry when, and only when,
// no live member holds it and every recently dead member's lease horizon has
// passed. See docs/recovery-design.md for the argument.
func (s *Server) Recover(ctx context.Context, req rdma.RecoverRequest) (rdma.RecoverReply, error) {
	if why := s.stopped(); why != "" {
		return rdma.RecoverReply{}, fmt.Errorf("%w: memory node deposed: %s", rdma.ErrUnreachable, why)
	}
	if req.Entry >= s.cfg.Entries {
		return rdma.RecoverReply{}, fmt.Errorf("%w: entry %d out of range", rdma.ErrBadRequest, req.Entry)
	}
	eraIdx := req.Entry % s.cfg.Eras
	mu := &s.eraMu[eraIdx]
	mu.Lock()
	defer mu.Unlock()
	eraOff := eraIdx * 8
	era, _ := s.eras.Load8(eraOff)
	refuse := func(after time.Duration, why string) (rdma.RecoverReply, error) {
		s.stats.RecoveriesRef.Add(1)
		return rdma.RecoverReply{Status: rdma.RecoverRefused, Era: era, RetryAfter: after, Reason: why}, nil
	}
	notYet := func(after time.Duration, why string) (rdma.RecoverReply, error) {
		s.stats.RecoveriesRef.Add(1)
		return rdma.RecoverReply{Status: rdma.RecoverNotYet, Era: era, RetryAfter: after, Reason: why}, nil
	}
	if req.Era != era {
		s.stats.RecoveriesStale.Add(1)
		return rdma.RecoverReply{Status: rdma.RecoverStale, Era: era, Reason: "era moved on"}, nil
	}
	entryOff := req.Entry * 16
	var buf [16]byte
	_ = s.locks.Read(entryOff, buf[:])
	before := rdma.U128From(buf[:])
	if before.Lo&^(1<<63) == 0 {
		s.stats.RecoveriesStale.Add(1)
		return rdma.RecoverReply{Status: rdma.RecoverStale, Era: era, Reason: "entry is free"}, nil
	}

	if s.cfg.PaperRecovery {
		return s.reset(req, eraOff, entryOff, before)
	}
	now := time.Now()
	s.mu.Lock()
	var wait time.Duration
	for _, t := range s.tombs {
		if d := t.horizon.Sub(now); d > wait {
			wait = d
		}
	}
	if req.Suspect != 0 {
		if _, live := s.members[req.Suspect]; live {
			s.mu.Unlock()
			return refuse(s.cfg.HeartbeatInterval, fmt.Sprintf("suspect node %d is alive", req.Suspect))
		}
	}
	live := make([]rdma.NodeID, 0, len(s.members))
	for id := range s.members {
		live = append(live, id)
	}
	prober := s.prober
	s.mu.Unlock()
	if wait > 0 {
		return notYet(wait, "a dead node's lease horizon has not passed")
	}
	if len(live) > 0 && prober == nil {
		return refuse(s.cfg.HeartbeatInterval, "no prober to ask live members")
	}
	// Waiters frozen by the first probe may enter again ProbeFreeze after it
	// reached them; finish well inside that, allowing for clock-rate drift.
	deadline := time.Now().Add(time.Duration(float64(rdma.ProbeFreeze)*(1-s.cfg.ClockDrift)) - 50*time.Millisecond)
	for _, id := range live {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeTimeout)
		h, err := prober.Probe(pctx, id, req.Entry)
		cancel()
		if err != nil {
			if s.Admit(id) != nil {
				continue // it died meanwhile; its horizon is checked on the next try
			}
			return refuse(s.cfg.HeartbeatInterval, fmt.Sprintf("probe of node %d failed: %v", id, err))
		}
		if h == rdma.HoldActive {
			return refuse(s.cfg.HeartbeatInterval, fmt.Sprintf("node %d holds the entry", id))
		}
	}
	// A member that died during the probes has a horizon we have not waited for.
	s.mu.Lock()
	for _, t := range s.tombs {
		if t.horizon.After(time.Now()) {
			s.mu.Unlock()
			return notYet(time.Until(t.horizon), "a node died during recovery")
		}
	}
	s.mu.Unlock()

	if time.Now().After(deadline) {
		return refuse(s.cfg.HeartbeatInterval, "probes took longer than the freeze window")
	}
	return s.reset(req, eraOff, entryOff, before)
}

// reset zeroes the entry's control word and leaps its RelCnt, if the entry
// still holds the value the decision was based on, and bumps the era.
func (s *Server) reset(req rdma.RecoverRequest, eraOff, entryOff uint64, before rdma.U128) (rdma.RecoverReply, error) {
	all := rdma.U128{Lo: ^uint64(0), Hi: ^uint64(0)}
	after := rdma.U128{Lo: 0, Hi: before.Hi + rdma.RecoveryLeap}
	if st := s.cfg.Store; st != nil {
		// The leap outruns the periodic high-water scan: save it first, so
		// a restart can never start below a token handed out after it.
		if err := st.Update(func(x *State) bool {
			if after.Hi > x.RelHighWater {
				x.RelHighWater = after.Hi
				return true
			}
			return false
		}); err != nil {
			era, _ := s.eras.Load8(eraOff)
			return rdma.RecoverReply{Status: rdma.RecoverRefused, Era: era, RetryAfter: time.Second, Reason: "cannot save state: " + err.Error()}, nil
		}
	}
	old, _ := s.locks.MaskedCAS128(entryOff, before, all, after, all)
	if old != before {
		era, _ := s.eras.Load8(eraOff)
		s.stats.RecoveriesRef.Add(1)
		return rdma.RecoverReply{Status: rdma.RecoverRefused, Era: era, Reason: "entry changed during recovery"}, nil
	}
	newEra, _ := s.eras.MaskedFAA64(eraOff, 1, 0)
	newEra++
	s.stats.Recoveries.Add(1)
	s.log.Warn("lock entry recovered", zap.Uint64("entry", req.Entry), zap.Uint64("era", newEra),
		zap.Uint16("suspect", uint16(req.Suspect)), zap.Uint64("relcnt", after.Hi))
	return rdma.RecoverReply{Status: rdma.RecoverDone, Era: newEra}, nil
}

// ErrClosed is returned by operations on a closed server.
var ErrClosed = errors.New("memnode: closed")

func putU64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}
