package lockmap

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestOnlyConfirmedTagsMakeShadows: the owner word of a held entry names a
// key and token. Only a confirmed tag (the holder's proxy granted it) may
// make another proxy answer as if it held the key. A tag ShiftLock installed
// as the lock reached a waiter whose client had already been told "no"
// (an abandoned wait) must not.
// heldElsewhere is key "k" held exclusively through a bare ShiftLock client
// (proxy a), seen from the map of proxy b; the test writes a's owner word
// itself.
type heldElsewhere struct {
	b *Map
	g *shiftlock.Guard
	// setOwner writes the holder's owner word; it reports errors with
	// t.Error, so that a goroutine may call it.
	setOwner func(uint64)
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
	ctx := context.Background()
	_, entry := b.Where("k")
	g, err := a.AcquireExclusive(ctx, entry)
	if err != nil {
		t.Fatal(err)
	}
	setOwner := func(w uint64) {
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], w)
		if err := epA.Write(ctx, epA.Layout().OwnerAddr(entry), buf[:]); err != nil {
			t.Error(err)
		}
	}
	return heldElsewhere{b: b, g: g, setOwner: setOwner}
}

func TestOnlyConfirmedTagsMakeShadows(t *testing.T) {
	h := holdElsewhere(t)
	b, g, setOwner, ctx := h.b, h.g, h.setOwner, context.Background()
	tag := ownerTag("k", "tok")
	setOwner(tag) // installed, not confirmed
	if _, ok, _ := b.Acquire(ctx, []string{"k"}, "tok", AcquireOptions{Mode: shiftlock.Exclusive, TTL: time.Minute}); ok {
		t.Fatal("an unconfirmed tag produced a shadow")
	}
	setOwner(confirmed(tag))
	f, ok, err := b.Acquire(ctx, []string{"k"}, "tok", AcquireOptions{Mode: shiftlock.Exclusive, TTL: time.Minute})
	if !ok || err != nil {
		t.Fatalf("a confirmed tag did not produce a shadow: %v %v", ok, err)
	}
	if f[0] != g.Token()+1 {
		t.Fatalf("shadow fence %d, holder's %d", f[0], g.Token()+1)
	}
	if _, ok, _ := b.Acquire(ctx, []string{"k"}, "other", AcquireOptions{Mode: shiftlock.Exclusive, TTL: time.Minute}); ok {
		t.Fatal("another token got the key")
	}
	g.Release(ctx)
}

// TestTryOnlyWaitsForAFreshHoldersTag: a try-only acquire (no wait budget)
// of the same key and token through a second proxy can arrive before the
// holder's proxy has confirmed its tag. It gives an unconfirmed holder the
// grace to confirm, and answers at once when another confirmed tag holds.
func TestTryOnlyWaitsForAFreshHoldersTag(t *testing.T) {
	defer func(g time.Duration) { tagGrace = g }(tagGrace)
	tagGrace = 10 * time.Second // the test's writer must land inside it on any host
	h := holdElsewhere(t)
	b, setOwner, ctx := h.b, h.setOwner, context.Background()
	defer h.g.Release(ctx)
	try := func(token string) bool {
		_, ok, err := b.Acquire(ctx, []string{"k"}, token, AcquireOptions{Mode: shiftlock.Exclusive, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	// Another key's confirmed holder: refused without waiting for anything.
	setOwner(confirmed(ownerTag("k", "someone-else")))
	start := time.Now()
	if try("tok") {
		t.Fatal("a different confirmed tag gave a shadow")
	}
	if time.Since(start) >= tagGrace {
		t.Fatal("a refusal against a confirmed holder waited out the grace")
	}

	// The holder is ours but not yet confirmed: the confirmation lands
	// while the try waits, and the try answers as a shadow.
	setOwner(0)
	go func() {
		time.Sleep(5 * time.Millisecond)
		setOwner(confirmed(ownerTag("k", "tok")))
	}()
	if !try("tok") {
		t.Fatal("the try-only acquire missed a confirmation that landed within its grace")
	}
}
