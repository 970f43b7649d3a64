package baseline_test

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestCASVerbs: uncontended, acquire and release are one CAS each; a
// reader takes the lock exclusively; a waiter retries, and with backoff the
// adaptive limit stays within SMART's bounds.
func TestCASVerbs(t *testing.T) {
	for _, backoff := range []bool{false, true} {
		cl := newCluster(t, 2, 8)
		a := baseline.NewCAS(cl.eps[0], baseline.CASConfig{Backoff: backoff})
		b := baseline.NewCAS(cl.eps[1], baseline.CASConfig{Backoff: backoff})
		ctx := ctxT(t)
		var g shiftlock.Grant
		var err error
		d := delta(cl.eps[0], func() { g, err = a.Acquire(ctx, 5, shiftlock.Shared) })
		if err != nil {
			t.Fatal(err)
		}
		if d.Out[rdma.VerbCAS] != 1 || d.OutAtomics() != 1 || d.Out[rdma.VerbRead] != 0 {
			t.Fatalf("acquire: %d CAS, %d atomics, %d reads; want one CAS", d.Out[rdma.VerbCAS], d.OutAtomics(), d.Out[rdma.VerbRead])
		}
		if w := cl.word(t, 5); w == 0 {
			t.Fatal("held lock word is zero")
		}
		// A second reader must not get in: the CAS lock has no shared mode.
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err = b.Acquire(short, 5, shiftlock.Shared)
		cancel()
		if err == nil {
			t.Fatal("a second holder got the CAS lock")
		}
		if b.Stats().Retries.Load() == 0 {
			t.Fatal("the blocked acquirer never retried")
		}
		if backoff {
			if l := b.BackoffLimit(); l < baseline.DefaultInitialBackoff || l > baseline.DefaultInitialBackoff<<10 {
				t.Fatalf("backoff limit %v outside [initial, initial·2^10]", l)
			}
		}
		d = delta(cl.eps[0], func() { err = g.Release(ctx) })
		if err != nil {
			t.Fatal(err)
		}
		if d.Out[rdma.VerbCAS] != 1 || d.OutAtomics() != 1 {
			t.Fatalf("release: %d CAS, want one", d.Out[rdma.VerbCAS])
		}
		if w := cl.word(t, 5); w != 0 {
			t.Fatalf("released lock word is %#x", w)
		}
		if g.Token() != 0 {
			t.Fatal("the CAS lock has no fencing token")
		}
	}
}

// TestCASReleaseNoticesForeignWord: a release that finds someone else's id
// in the word reports it instead of clearing it.
func TestCASReleaseNoticesForeignWord(t *testing.T) {
	cl := newCluster(t, 1, 2)
	l := baseline.NewCAS(cl.eps[0], baseline.CASConfig{})
	ctx := ctxT(t)
	g, err := l.Acquire(ctx, 1, shiftlock.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	b[0] = 0x42
	if err := cl.eps[0].Write(ctx, rdma.Addr{Region: rdma.RegionLocks, Offset: 16}, b[:]); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err == nil {
		t.Fatal("release of an overwritten word succeeded")
	}
	if w := cl.word(t, 1); w != 0x42 {
		t.Fatalf("release changed a word it did not own: %#x", w)
	}
}
