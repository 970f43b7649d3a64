package bank_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/bank"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestRedlockRSBehavesLikeTheCrate checks the redlock-rs-style locker
// against a real redis-server: a connection per command, the crate's
// key/value/PX on the server, a taken lock waited for across the crate's
// retry sleeps, and an expired lock reported at release.
func TestRedlockRSBehavesLikeTheCrate(t *testing.T) {
	srv := testproc.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	l, err := bank.NewRedlockRSLocker([]string{srv.Addr}, 0)
	if err != nil {
		t.Fatal(err)
	}
	before, err := rdb.InfoMap(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	conns0 := l.Connections()
	h, err := l.Acquire(ctx, []bank.LockReq{{Key: "lock:acct:1", Mode: bank.Exclusive}})
	if err != nil {
		t.Fatal(err)
	}
	// The artifact's TTL: 10 ms.
	if pttl := rdb.PTTL(ctx, "lock:acct:1").Val(); pttl <= 0 || pttl > 10*time.Millisecond {
		t.Errorf("PTTL %v, want (0, 10ms]", pttl)
	}
	if n := l.Connections() - conns0; n != 1 {
		t.Errorf("one uncontended lock opened %d connections, want 1", n)
	}
	after, _ := rdb.InfoMap(ctx, "stats").Result()
	n0, _ := strconv.Atoi(before["Stats"]["total_connections_received"])
	n1, _ := strconv.Atoi(after["Stats"]["total_connections_received"])
	got := n1 - n0
	if got != 1 {
		t.Errorf("redis-server received %d connections for one lock, want 1", got)
	}
	// 10 ms is far less than this test's pause: the lock has expired, and
	// Release says so.
	time.Sleep(30 * time.Millisecond)
	if err := h.Release(ctx); err == nil {
		t.Error("release after the TTL ran out: no error")
	}

	// A held lock: the second acquirer fails its try, sleeps up to 200 ms,
	// and keeps calling lock() until the key is free.
	long, err := bank.NewRedlockRSLocker([]string{srv.Addr}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := long.Acquire(ctx, []bank.LockReq{{Key: "lock:acct:2", Mode: bank.Exclusive}})
	if err != nil {
		t.Fatal(err)
	}
	got2 := make(chan error, 1)
	start := time.Now()
	go func() {
		h2, err := long.Acquire(ctx, []bank.LockReq{{Key: "lock:acct:2", Mode: bank.Exclusive}})
		if err == nil {
			err = h2.Release(ctx)
		}
		got2 <- err
	}()
	time.Sleep(400 * time.Millisecond)
	select {
	case err := <-got2:
		t.Fatalf("second acquirer finished while the lock was held: %v", err)
	default:
	}
	c0 := long.Connections()
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got2; err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 400*time.Millisecond {
		t.Errorf("second acquirer took %v", el)
	}
	if long.Connections() == c0 {
		t.Error("no connections opened after the release")
	}

	// Only the caller's context ends the forever-loop.
	h3, err := long.Acquire(ctx, []bank.LockReq{{Key: "lock:acct:3", Mode: bank.Exclusive}})
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Release(ctx)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := long.Acquire(short, []bank.LockReq{{Key: "lock:acct:3", Mode: bank.Exclusive}}); !errors.Is(err, bank.ErrNotAcquired) {
		t.Errorf("acquire of a held lock under a 300 ms context: %v, want ErrNotAcquired", err)
	}
}
