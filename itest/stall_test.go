package itest

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
)

// TestStalledMemnodeHoldsUpOnlyItsKeys: the proxy's event loop does not
// wait for a memory node's answer. With one of its two memory nodes
// stopped (SIGSTOP), a SET NX for a key there stays unanswered, while on the
// same event loop PING, and SET NX and release for the other memory node's
// keys, are answered meanwhile (before the stopped node's verbs time out).
// Once the node runs again, its keys work
// again.
func TestStalledMemnodeHoldsUpOnlyItsKeys(t *testing.T) {
	// A long dead_after: the proxy keeps its membership (and the loop, if
	// it waited for the node, would keep waiting) for 20 s of silence,
	// far longer than the checks below take.
	a := testproc.Memnode(t, "-entries", "65536", "-dead-after", "20s")
	b := testproc.Memnode(t, "-entries", "65536", "-dead-after", "20s")
	// One event loop: every connection shares it, and its doorbell.
	p := testproc.Proxy(t, "-memnode", a.Addr+","+b.Addr, "-event-loops", "1")
	entries := []uint64{65536, 65536}
	keyOn := func(dom, skip int) string {
		for i := 0; ; i++ {
			k := fmt.Sprint("stall:", i)
			if d, _ := lockmap.Locate(k, entries); d == dom {
				if skip == 0 {
					return k
				}
				skip--
			}
		}
	}
	ka := keyOn(0, 0)
	conn := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 1, MaxRetries: -1, ReadTimeout: time.Minute})
		t.Cleanup(func() { c.Close() })
		return c
	}
	stuck, other, piped := conn(), conn(), conn()
	ctx := ctxT(t, 2*time.Minute)
	for _, k := range []string{ka, keyOn(1, 0)} {
		if err := lockCycle(ctx, other, k, "warm", time.Minute); err != nil {
			t.Fatalf("before the stop: %v", err)
		}
	}
	if err := stuck.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Held across the stop, for a release pipelined with an acquire on
	// the other node.
	ka2, kb2 := keyOn(0, 1), keyOn(1, 20)
	if ok, err := piped.SetNX(ctx, ka2, "piped", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SET NX %s before the stop: %v %v", ka2, ok, err)
	}

	if err := a.Freeze(); err != nil {
		t.Fatal(err)
	}
	held := setNXLater(ctx, stuck, ka, "stuck", time.Minute)
	// A client told "released" must not find the key still held: the
	// release's reply waits for the stopped node, and so does the reply
	// of the acquire pipelined behind it, although its own node answered.
	pipe := make(chan []redis.Cmder, 1)
	go func() {
		p := piped.Pipeline()
		redis.NewScript(casDelete).Run(ctx, p, []string{ka2}, "piped")
		p.SetNX(ctx, kb2, "piped", time.Minute)
		cmds, _ := p.Exec(ctx)
		pipe <- cmds
	}()
	// Let the SET reach the loop and go out to the stopped node. (Should
	// it arrive later, the checks below still hold, and prove less.)
	time.Sleep(200 * time.Millisecond)

	pending := func(what string) {
		t.Helper()
		if strings.Contains(p.Output(), "membership lost") {
			t.Fatalf("the proxy lost its membership of the stopped node before %s was answered: the loop waited for the node", what)
		}
		select {
		case err := <-held:
			t.Fatalf("the SET NX on the stopped memory node was answered (%v) before %s: the loop waited for it", err, what)
		default:
		}
		select {
		case cmds := <-pipe:
			t.Fatalf("a release on the stopped memory node was answered before %s: %v", what, cmds)
		default:
		}
	}
	// A loop that waited for the node would answer these only when the
	// stopped node's verbs time out: a deadline of half that timeout is a
	// liveness bound, not a speed one (they take milliseconds).
	octx, cancel := context.WithTimeout(ctx, tcpfab.DefaultTimeout/2)
	defer cancel()
	if err := other.Ping(octx).Err(); err != nil {
		t.Fatalf("PING while a memory node is stopped: %v", err)
	}
	pending("PING on another connection")
	for i := 0; i < 10; i++ {
		if err := lockCycle(octx, other, keyOn(1, i), "other", time.Minute); err != nil {
			t.Fatalf("on the running memory node: %v", err)
		}
	}
	pending("ten lock cycles on the running memory node")

	a.Signal(syscall.SIGCONT)
	err := <-held
	// The stop may have outlasted the proxy's lease: then the client was
	// told to try again, as redsync and redis-py do.
	if err != nil && err != redis.Nil && !isTryAgain(err) {
		t.Fatalf("the held SET NX ended with %v", err)
	}
	t.Logf("the held SET NX, once the node ran again: %v", err)
	cmds := <-pipe
	if n, err := cmds[0].(*redis.Cmd).Int(); n != 1 || err != nil {
		t.Fatalf("the pipelined release: %d %v; want 1", n, err)
	}
	if ok, err := cmds[1].(*redis.BoolCmd).Result(); !ok || err != nil {
		t.Fatalf("the pipelined SET NX on the running node: %v %v", ok, err)
	}
	for {
		err := stuck.SetNX(ctx, ka, "after", time.Minute).Err()
		if err == nil {
			break
		}
		if !isTryAgain(err) {
			t.Fatalf("SET NX on the resumed memory node: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the resumed memory node's keys never worked again: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
