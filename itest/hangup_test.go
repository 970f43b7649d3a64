package itest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// queueBehindHolder starts a proxy that lets an acquire wait 5 s, and has
// a client (which it returns) take key there with the value "holder". It
// then sends SET key value NX PX 60000 on a connection of its own (which it
// returns too), and waits until that SET has found the key held and queued.
func queueBehindHolder(t *testing.T, key, value string) (*redis.Client, *rawConn) {
	t.Helper()
	p := testproc.Proxy(t, "-acquire-wait", "5s")
	c := client(t, p.Addr)
	if ok, err := c.SetNX(ctxT(t, 10*time.Second), key, "holder", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("the holder's SET NX: %v %v", ok, err)
	}
	conn := dialRaw(t, p.Addr)
	conn.send([]string{"SET", key, value, "NX", "PX", "60000"})
	// The swap onto the queue does not depend on the client still being
	// there.
	awaitInfo(t, c, "waits=1")
	return c, conn
}

// TestQueuedClientHangsUp: a client queued for a held key hangs up. When the
// holder releases, the departed client's waiter gets the lock and releases
// it at once, so the next client is not locked out for the TTL it asked for.
func TestQueuedClientHangsUp(t *testing.T) {
	c, quitter := queueBehindHolder(t, "h", "quitter")
	ctx := ctxT(t, time.Minute)
	quitter.c.Close()
	// The proxy noticed the hang-up and gave the wait up to the background.
	awaitInfo(t, c, "abandoned_waits=1")
	if n, _ := c.Eval(ctx, casDelete, []string{"h"}, "holder").Int(); n != 1 {
		t.Fatal("holder release")
	}
	// The next client gets the key right away (with waiting off, a held key
	// would answer nil): nobody holds it for the quitter's 60 s.
	var ok bool
	for end := time.Now().Add(10 * time.Second); !ok && time.Now().Before(end); {
		ok, _ = c.Do(ctx, "LOCK.ACQUIRE", "h", "next", "PX", "60000", "WAIT", "0").Bool()
		if !ok {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !ok {
		t.Fatal("the lock stayed with a client that hung up while queued")
	}
}

// TestPipelineWhileQueued: commands pipelined behind a queued SET run at
// once and are answered in order once it is granted; watching for hang-ups
// must not consume them.
func TestPipelineWhileQueued(t *testing.T) {
	c, conn := queueBehindHolder(t, "pl", "who")
	ctx := ctxT(t, time.Minute)
	conn.send([]string{"ECHO", "after"}, []string{"GET", "pl"})
	// Give the pipelined commands time to reach the proxy's socket while
	// the SET waits; if they arrive later the replies are the same.
	time.Sleep(100 * time.Millisecond)
	c.Eval(ctx, casDelete, []string{"pl"}, "holder")
	// The GET ran while the SET waited: it saw the holder.
	for _, want := range []string{"+OK", "after", "holder"} {
		if got := conn.read(); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}
