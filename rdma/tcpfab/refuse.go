package tcpfab

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// RefusalLogEvery is how often, at most, a fabric port logs a connection it
// refused after the first: anyone who can reach the port can make it refuse
// connections as fast as they can open them, and a line for each once wrote
// 11 MB of log in 10 s. The count in Refusals is exact; the log is a sample.
const RefusalLogEvery = 10 * time.Second

// Refusals counts the connections a fabric port closed because they failed
// the fabric secret's challenge, and logs them sampled: the first at once,
// with its reason, then at most one line per RefusalLogEvery, which also
// says how many were refused since the last line. Export Count as a
// metric. The zero value is ready; one Refusals may serve several ports
// (a proxy's peer ports, across rejoins).
type Refusals struct {
	n atomic.Uint64

	mu       sync.Mutex
	next     time.Time // no line before this
	unlogged uint64    // refusals since the last line, not counting it
}

// Count is the number of connections refused so far.
func (r *Refusals) Count() uint64 { return r.n.Load() }

// refuse counts one refused connection and logs it if a line is due.
func (r *Refusals) refuse(log *zap.Logger, msg, remote string, err error) {
	total := r.n.Add(1)
	now := time.Now()
	r.mu.Lock()
	if now.Before(r.next) {
		r.unlogged++
		r.mu.Unlock()
		return
	}
	skipped := r.unlogged
	r.unlogged = 0
	r.next = now.Add(RefusalLogEvery)
	r.mu.Unlock()
	log.Warn(msg, zap.String("remote", remote), zap.Error(err),
		zap.Uint64("unlogged_refusals", skipped), zap.Uint64("refused_total", total),
		zap.Duration("logged_at_most_every", RefusalLogEvery))
}
