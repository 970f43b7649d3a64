package itest

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

func send(t *testing.T, c net.Conn, cmd string) {
	t.Helper()
	if _, err := c.Write([]byte(cmd)); err != nil {
		t.Fatal(err)
	}
}

// awaitInfo waits until the proxy's INFO mentions want.
func awaitInfo(t *testing.T, c *redis.Client, want string) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	for {
		info, err := c.Info(ctx, "locks", "clients").Result()
		if err != nil {
			t.Fatalf("INFO: %v", err)
		}
		if strings.Contains(info, want) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQueuedClientHangsUp: a client queued for a held key hangs up. When the
// holder releases, the departed client's waiter gets the lock and releases
// it at once, so the next client is not locked out for the TTL it asked for.
func TestQueuedClientHangsUp(t *testing.T) {
	p := testproc.Proxy(t, "-acquire-wait", "5s")
	c := client(t, p.Addr)
	ctx := ctxT(t, time.Minute)
	if ok, _ := c.SetNX(ctx, "h", "holder", time.Minute).Result(); !ok {
		t.Fatal("setup")
	}
	quitter, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	send(t, quitter, "*6\r\n$3\r\nSET\r\n$1\r\nh\r\n$7\r\nquitter\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n60000\r\n")
	// It found the key held and queued (the swap onto the queue does not
	// depend on the client still being there).
	awaitInfo(t, c, "waits=1")
	quitter.Close()
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
	p := testproc.Proxy(t, "-acquire-wait", "5s")
	c := client(t, p.Addr)
	ctx := ctxT(t, time.Minute)
	if ok, _ := c.SetNX(ctx, "pl", "holder", time.Minute).Result(); !ok {
		t.Fatal("setup")
	}
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send(t, conn, "*6\r\n$3\r\nSET\r\n$2\r\npl\r\n$3\r\nwho\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n60000\r\n")
	awaitInfo(t, c, "waits=1") // queued
	send(t, conn, "*2\r\n$4\r\nECHO\r\n$5\r\nafter\r\n*2\r\n$3\r\nGET\r\n$2\r\npl\r\n")
	// Give the pipelined commands time to reach the proxy's socket while
	// the SET waits; if they arrive later the replies are the same.
	time.Sleep(100 * time.Millisecond)
	c.Eval(ctx, casDelete, []string{"pl"}, "holder")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	// The GET ran while the SET waited: it saw the holder.
	want := []string{"+OK\r\n", "$5\r\n", "after\r\n", "$6\r\n", "holder\r\n"}
	for _, w := range want {
		line, err := r.ReadString('\n')
		if err != nil || line != w {
			t.Fatalf("got %q (%v), want %q", line, err, w)
		}
	}
}
