package lockmap

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// heldElsewhere is key "k" held exclusively, with the owner tag of token
// TokT, through a bare ShiftLock client (proxy a) that the test vouches for
// by hand, seen from the map of proxy b.
type heldElsewhere struct {
	b *Map
	g *shiftlock.Guard
}

func holdElsewhere(t *testing.T) heldElsewhere {
	t.Helper()
	host := memnode.New(memnode.Config{Entries: 1 << 10, DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	fab := memfab.New(host)
	epA, _ := fab.Join("a")
	epB, _ := fab.Join("b")
	a := shiftlock.NewClient(epA, shiftlock.Config{OwnerTags: true})
	b := New([]*Domain{{Name: "m", Client: shiftlock.NewClient(epB, shiftlock.Config{OwnerTags: true})}}, Config{})
	t.Cleanup(b.Close)
	_, entry := b.Where("k")
	g, err := a.AcquireExclusiveTagged(context.Background(), entry, ownerTag("k", TokT))
	if err != nil {
		t.Fatal(err)
	}
	return heldElsewhere{b: b, g: g}
}

// TestOnlyVouchedHoldersMakeShadows: only a holder whose client was told it
// holds the key (Vouch) may make another proxy answer as if it held the key
// too. A holder nobody vouched for, such as a wait its client gave up on,
// must not.
func TestOnlyVouchedHoldersMakeShadows(t *testing.T) {
	h := holdElsewhere(t)
	b, g, ctx := h.b, h.g, context.Background()
	defer func(d time.Duration) { tagGrace = d }(tagGrace)
	tagGrace = 20 * time.Millisecond
	opt := AcquireOptions{Mode: shiftlock.Exclusive, TTL: time.Minute}
	if _, ok, _ := b.Acquire(ctx, []string{"k"}, TokT, opt); ok {
		t.Fatal("an unvouched holder produced a shadow")
	}
	g.Vouch()
	f, ok, err := b.Acquire(ctx, []string{"k"}, TokT, opt)
	if !ok || err != nil {
		t.Fatalf("a vouched holder did not produce a shadow: %v %v", ok, err)
	}
	if f[0] != g.Token()+1 {
		t.Fatalf("shadow fence %d, holder's %d", f[0], g.Token()+1)
	}
	if _, ok, _ := b.Acquire(ctx, []string{"k"}, "other", opt); ok {
		t.Fatal("another token got the key")
	}
	g.Release(ctx)
}

// TestTryOnlyWaitsForAFreshHolder: a try-only acquire (no wait budget) of
// the same key and token through a second proxy can arrive before the
// holder's proxy has told its client. It gives an unvouched holder of its
// tag the grace to be vouched for, and is refused at once by a holder of
// another tag.
func TestTryOnlyWaitsForAFreshHolder(t *testing.T) {
	defer func(g time.Duration) { tagGrace = g }(tagGrace)
	tagGrace = 10 * time.Second // the test's vouch must land inside it on any host
	h := holdElsewhere(t)
	b, ctx := h.b, context.Background()
	defer h.g.Release(ctx)
	try := func(token string) bool {
		_, ok, err := b.Acquire(ctx, []string{"k"}, token, AcquireOptions{Mode: shiftlock.Exclusive, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	start := time.Now()
	if try("someone-else") {
		t.Fatal("a different token got a shadow")
	}
	if time.Since(start) >= tagGrace {
		t.Fatal("a refusal by a holder of another tag waited out the grace")
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		h.g.Vouch()
	}()
	if !try(TokT) {
		t.Fatal("the try-only acquire missed a vouch that landed within its grace")
	}
}
