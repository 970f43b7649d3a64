package rdma

import (
	"errors"
	"testing"
)

func TestInboxRoutesAndRefusesStale(t *testing.T) {
	var ib Inbox
	t1, ch1, _ := ib.Open()
	t2, ch2, _ := ib.Open()
	if err := ib.Deliver(Message{From: 3, To: t2, Payload: Payload{2}}); err != nil {
		t.Fatal(err)
	}
	if m := <-ch2; m.From != 3 || m.Payload[0] != 2 {
		t.Fatalf("wrong message %+v", m)
	}
	select {
	case m := <-ch1:
		t.Fatalf("message leaked to the other target: %+v", m)
	default:
	}
	ib.Close(t1)
	if err := ib.Deliver(Message{To: t1}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("closed target accepted a message: %v", err)
	}
	t3, _, _ := ib.Open() // reuses t1's slot with a new generation
	if t3 == t1 || uint32(t3)&0xffff != uint32(t1)&0xffff {
		t.Fatalf("expected slot reuse with new generation: %#x %#x", t1, t3)
	}
	if err := ib.Deliver(Message{To: t1}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("stale generation accepted: %v", err)
	}
	for i := 0; i < inboxDepth; i++ {
		if err := ib.Deliver(Message{To: t3}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ib.Deliver(Message{To: t3}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("full queue must refuse, got %v", err)
	}
	if t3 > MaxTarget {
		t.Fatalf("target %#x exceeds 24 bits", t3)
	}
}

// TestInboxFull: an inbox holds MaxTargets targets at once (a lock entry
// names a target's slot in 16 bits); past that Open fails with ErrInboxFull,
// and a Close makes room.
func TestInboxFull(t *testing.T) {
	var ib Inbox
	var last Target
	for i := 0; i < MaxTargets; i++ {
		tg, _, err := ib.Open()
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		last = tg
	}
	if _, _, err := ib.Open(); !errors.Is(err, ErrInboxFull) {
		t.Fatalf("Open with %d open: %v, want ErrInboxFull", MaxTargets, err)
	}
	ib.Close(last)
	if _, _, err := ib.Open(); err != nil {
		t.Fatalf("Open after a Close: %v", err)
	}
}
