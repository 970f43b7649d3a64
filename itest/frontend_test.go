package itest

import (
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestFrontends runs the basic scenario on each RESP front end by name,
// whatever SHIFTLOCK_TEST_FRONTEND picks for the other tests, so that the
// one not chosen stays covered: redsync contention with a hand-over, SET NX
// and the compare-and-delete script through go-redis, commands pipelined
// behind a queued SET, and a client hanging up while queued.
func TestFrontends(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe, "-acquire-wait", "5s")
		c := client(t, p.Addr)
		ctx := ctxT(t, time.Minute)

		if ok, err := c.SetNX(ctx, "k", "me", 10*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SetNX: %v %v", ok, err)
		}
		if v, _ := c.Get(ctx, "k").Result(); v != "me" {
			t.Fatalf("GET = %q", v)
		}
		if n, err := c.Eval(ctx, casDelete, []string{"k"}, "me").Int(); n != 1 || err != nil {
			t.Fatalf("compare-and-delete: %d %v", n, err)
		}

		// A redsync waiter is handed the lock when the holder unlocks.
		rs := redsync.New(pools(t, p.Addr)...)
		holder := rs.NewMutex("hot", redsync.WithExpiry(8*time.Second))
		if err := holder.LockContext(ctx); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var werr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := rs.NewMutex("hot", redsync.WithExpiry(8*time.Second), redsync.WithTries(1))
			if werr = w.LockContext(ctx); werr == nil {
				_, werr = w.UnlockContext(ctx)
			}
		}()
		awaitInfo(t, c, "blocked_clients:1")
		if ok, err := holder.UnlockContext(ctx); !ok || err != nil {
			t.Fatalf("unlock: %v %v", ok, err)
		}
		wg.Wait()
		if werr != nil {
			t.Fatalf("waiter: %v", werr)
		}

		// Pipelined behind a queued SET: run at once (the GET, once the
		// SET has queued, sees the holder, as on Redis after a refused
		// SET NX), and answered after it, in order.
		if ok, _ := c.SetNX(ctx, "pl", "holder", time.Minute).Result(); !ok {
			t.Fatal("setup")
		}
		conn := dialRaw(t, p.Addr)
		conn.send([]string{"SET", "pl", "who", "NX", "PX", "60000"}, []string{"PING"}, []string{"GET", "pl"})
		awaitInfo(t, c, "blocked_clients:1")
		// A second client queues behind it and hangs up.
		quitter := dialRaw(t, p.Addr)
		quitter.send([]string{"SET", "pl", "quitter", "NX", "PX", "60000"})
		awaitInfo(t, c, "blocked_clients:2")
		quitter.c.Close()
		awaitInfo(t, c, "blocked_clients:1")
		if n, _ := c.Eval(ctx, casDelete, []string{"pl"}, "holder").Int(); n != 1 {
			t.Fatal("holder release")
		}
		for _, want := range []string{"+OK", "+PONG", "holder"} {
			if got := conn.read(); got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		}
		// The quitter's place went nowhere: the key is who's.
		if v, _ := c.Get(ctx, "pl").Result(); v != "who" {
			t.Fatalf("GET pl = %q", v)
		}
	})
}
