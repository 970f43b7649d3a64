package ha

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Follower tracks a shard's record through an etcd watch, for a proxy that
// must join whichever memory node the record names.
type Follower struct {
	cli   *clientv3.Client
	shard string
	log   *zap.Logger

	mu      sync.Mutex
	rec     Record
	ok      bool
	changed chan struct{}
}

// Follow reads shard's record and keeps it current until ctx ends. It does
// not wait for etcd: until the first read succeeds, Current reports nothing.
func Follow(ctx context.Context, cli *clientv3.Client, shard string, log *zap.Logger) *Follower {
	if log == nil {
		log = zap.NewNop()
	}
	f := &Follower{cli: cli, shard: shard, log: log, changed: make(chan struct{})}
	go f.run(ctx)
	return f
}

// Current returns the record as last seen; ok is false if none was seen.
func (f *Follower) Current() (Record, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec, f.ok
}

// Changed is closed at the next change of the record.
func (f *Follower) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *Follower) set(rec Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ok && rec.Active == f.rec.Active && rec.Generation == f.rec.Generation {
		f.rec = rec
		return
	}
	if f.ok {
		f.log.Info("shard record changed", zap.String("shard", f.shard), zap.String("active", rec.Active),
			zap.Uint64("generation", rec.Generation))
	}
	f.rec, f.ok = rec, true
	close(f.changed)
	f.changed = make(chan struct{})
}

// run reads, then watches from the revision read; a broken watch (etcd
// restarted, the revision compacted) starts over with a fresh read.
func (f *Follower) run(ctx context.Context) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rec, ok, rev, err := read(rctx, f.cli, f.shard)
		cancel()
		if err != nil {
			f.log.Warn("cannot read the shard record; retrying", zap.String("shard", f.shard), zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if ok {
			f.set(rec)
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range f.cli.Watch(wctx, RecordKey(f.shard), clientv3.WithRev(rev+1)) {
			if resp.Err() != nil {
				f.log.Warn("shard watch broke; re-reading", zap.String("shard", f.shard), zap.Error(resp.Err()))
				break
			}
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				if rec, err := decode(ev.Kv.Value); err == nil {
					f.set(rec)
				} else {
					f.log.Error("ignoring a bad shard record", zap.String("shard", f.shard), zap.Error(err))
				}
			}
		}
		wcancel()
	}
}
