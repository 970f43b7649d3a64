package memnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// State is the small record a memory node keeps on disk so that a restart,
// which loses the lock table, can neither hand out a fencing token it may
// have handed out before nor grant a lock that an old grant still covers.
type State struct {
	// Generation counts starts.
	Generation uint64 `json:"generation"`
	// RelHighWater is at or above every RelCnt the table could hold when it
	// was written; the next generation starts its table above it.
	RelHighWater uint64 `json:"relcnt_high_water"`
	// MaxHorizonMs bounds, from whenever the record is read, how long a
	// grant made under this node may still be in force: it is at least
	// every horizon the node confirmed to a member, and the latest horizon
	// of any member, counted from when it was saved. It comes down as the
	// members' horizons do (persist).
	MaxHorizonMs uint64 `json:"max_horizon_ms"`
	// SavedAt is informational.
	SavedAt time.Time `json:"saved_at"`
}

const stateFile = "memnode-state.json"

// A StateStore keeps the State where the next generation will find it: a
// directory (Open) or etcd (package ha). The memory node saves a longer
// horizon before it confirms it to members, and a RelCnt leap before it
// makes it, so Update must be durable when it returns nil.
type StateStore interface {
	// Update applies f to the saved state and saves the result if f
	// reports a change. On an error nothing was saved.
	Update(f func(*State) bool) error
	// Get returns the state last saved.
	Get() State
}

// NextGeneration is the state a new generation starts from, given the last
// saved one (existed is false when nothing was ever saved), and the grace
// it owes the previous generation: its saved horizon, stretched by the drift
// allowance, plus cfg.DeadAfter (none for a Solo node, which died with its
// only member). Between two saves RelCnt grows
// by releases only (recoveries save before they leap), far fewer than
// rdma.RecoveryLeap in any interval, so the new table starts above every
// fencing token the previous generations may have handed out.
func NextGeneration(prev State, existed bool, cfg Config) (State, time.Duration) {
	cfg.defaults()
	next := prev
	next.Generation++
	if !existed {
		return next, 0
	}
	next.RelHighWater = prev.RelHighWater + rdma.RecoveryLeap
	grace := time.Duration(float64(time.Duration(prev.MaxHorizonMs)*time.Millisecond) * (1 + cfg.ClockDrift))
	if !cfg.Solo {
		grace += cfg.DeadAfter
	}
	return next, grace
}

// store writes State durably: to a temporary file, fsynced, renamed over
// the old one, and the directory fsynced, so a crash leaves either record.
type store struct {
	dir  string
	lock *os.File // holds an exclusive flock on the directory's lock file
	mu   sync.Mutex
	st   State
}

// lockFile is the file a memory node holds an exclusive flock on for as long
// as it uses a state directory: two processes on one directory would each
// start a generation from the same record and wait out neither's leases.
const lockFile = "LOCK"

// lockDir takes dir's lock, or says who holds it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(filepath.Join(dir, lockFile))
		_ = f.Close()
		return nil, fmt.Errorf("memnode: state directory %s is in use by another process (%s): each memory node needs a state directory of its own", dir, strings.TrimSpace(string(holder)))
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "pid %d\n", os.Getpid())
	return f, nil
}

// Close releases the state directory (memnode.Server.Close calls it).
func (s *store) Close() error {
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close()
	s.lock = nil
	return err
}

func (s *store) load() (State, bool, error) {
	raw, err := os.ReadFile(filepath.Join(s.dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	var st State
	if err := json.Unmarshal(raw, &st); err != nil {
		return State{}, false, fmt.Errorf("memnode: corrupt state file %s: %w", filepath.Join(s.dir, stateFile), err)
	}
	if st.Generation == 0 {
		// Every file written here names a generation: read as a first
		// start, this one would owe the previous run nothing.
		return State{}, false, fmt.Errorf("memnode: corrupt state file %s: it names no generation (%q)", filepath.Join(s.dir, stateFile), raw[:min(len(raw), 80)])
	}
	return st, true, nil
}

// Update applies f to the state and saves it if f reports a change.
func (s *store) Update(f func(*State) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.st
	if !f(&next) {
		return nil
	}
	next.SavedAt = time.Now().UTC()
	raw, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, stateFile+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(raw, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(s.dir, stateFile))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	s.st = next
	return nil
}

func (s *store) Get() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Open prepares cfg for a memory node that keeps its state in dir: the next
// generation; a table that starts above every RelCnt (every fencing token)
// the previous generations may have handed out; and, after a restart, no
// joins until every lease the previous generation may have backed has run
// out: its longest confirmed horizon (with the drift allowance) plus
// DeadAfter, or cfg.GraceUntil if that is later.
func Open(dir string, cfg Config) (Config, error) {
	cfg.defaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cfg, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return cfg, err
	}
	s := &store{dir: dir, lock: lock}
	prev, existed, err := s.load()
	if err != nil {
		_ = s.Close()
		return cfg, err
	}
	s.st = prev
	next, grace := NextGeneration(prev, existed, cfg)
	if until := time.Now().Add(grace); grace > 0 && until.After(cfg.GraceUntil) {
		cfg.GraceUntil = until
	}
	if err := s.Update(func(st *State) bool { *st = next; return true }); err != nil {
		_ = s.Close()
		return cfg, fmt.Errorf("memnode: saving state: %w", err)
	}
	cfg.Generation = next.Generation
	cfg.RelBase = next.RelHighWater
	cfg.Store = s
	return cfg, nil
}
