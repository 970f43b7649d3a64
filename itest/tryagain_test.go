package itest

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestMemnodeStopAnswersTryAgain (issue 32, item 12): the memory node is
// stopped (SIGSTOP) until the proxy declares the membership dead, and
// resumed at once. The proxy closes the old membership, which waits up to
// 2 s for an abandoned acquisition to finish in the background, and
// rejoins. Meanwhile the heartbeats that were queued during the stop are
// acknowledged, so the old lease looks valid again while its lock client is
// already closed. Every error a client gets in all this must be the
// documented -TRYAGAIN, which clients retry: before, acquires that reached
// the closed client were answered "ERR shiftlock: client closed".
func TestMemnodeStopAnswersTryAgain(t *testing.T) {
	eachFrontend(t, memnodeStopAnswersTryAgain)
}

func memnodeStopAnswersTryAgain(t *testing.T, fe string) {
	// dead_after 3s: the memory node, resumed as soon as the proxy gives
	// up on it, still finds the proxy's queued heartbeats fresh and does
	// not fence it.
	mn := testproc.Memnode(t, "-entries", "65536", "-dead-after", "3s")
	p := testproc.Proxy(t, "-memnode", mn.Addr, "-acquire-wait", "0s", "-frontend", fe)
	ctx := ctxT(t, 2*time.Minute)

	// An acquisition abandoned behind a holder keeps finishing in the
	// background, so closing the membership waits for it (up to 2 s).
	holder := client(t, p.Addr)
	if ok, err := holder.SetNX(ctx, "ta:held", "x", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	if err := holder.Do(ctx, "LOCK.ACQUIRE", "ta:held", "y", "PX", "60000", "WAIT", "100").Err(); err != redis.Nil {
		t.Fatalf("LOCK.ACQUIRE behind the holder = %v, want nil after its wait", err)
	}

	var (
		mu     sync.Mutex
		errs   = map[string]int{}
		grants int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 1, MaxRetries: -1, ReadTimeout: time.Minute})
		t.Cleanup(func() { c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			release := redis.NewScript(casDelete)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key, token := fmt.Sprintf("ta:%d:%d", w, i%3), fmt.Sprint(i)
				var err error
				if i%2 == 0 {
					err = c.Do(ctx, "LOCK.ACQUIRE", key, token, "PX", "5000").Err()
				} else {
					err = c.SetNX(ctx, key, token, 5*time.Second).Err()
				}
				if err == nil {
					mu.Lock()
					grants++
					mu.Unlock()
					err = release.Run(ctx, c, []string{key}, token).Err()
				}
				if err != nil && err != redis.Nil {
					msg := err.Error()
					if len(msg) > 60 {
						msg = msg[:60]
					}
					mu.Lock()
					errs[msg]++
					mu.Unlock()
				}
			}
		}()
	}
	waitGrants := func(n int) {
		t.Helper()
		for {
			mu.Lock()
			g := grants
			mu.Unlock()
			if g >= n {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("only %d grants of %d", g, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitGrants(100)
	if err := mn.Freeze(); err != nil {
		t.Fatal(err)
	}
	// Until the proxy gives up on the stopped memory node.
	awaitOutput(t, p, "membership lost", time.Minute)
	mn.Signal(syscall.SIGCONT)
	// Served again after the rejoin.
	mu.Lock()
	before := grants
	mu.Unlock()
	waitGrants(before + 200)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("errors around the stop: %v", errs)
	for msg, n := range errs {
		if !strings.HasPrefix(msg, "TRYAGAIN ") {
			t.Errorf("%d replies %q; every error while the membership is gone or being replaced must be -TRYAGAIN", n, msg)
		}
	}
}
