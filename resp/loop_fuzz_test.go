package resp

import (
	"bytes"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// loopRun is what one connection of the event loop did with some input.
type loopRun struct {
	out     string
	writes  int
	traffic int // onTraffic calls: input arrivals and wake-ups
	closed  bool
}

// runLoop feeds chunks to a new connection, one arrival each, letting any
// command that went to a goroutine finish before the next arrival. A
// command that waits longer than a moment has its connection's context
// cancelled, as if the client had gone (without closing, so that the
// number of replies stays a function of the input).
func runLoop(t *testing.T, s *Server, chunks ...[]byte) loopRun {
	c := newLoopClient(t, s)
	var r loopRun
	for _, chunk := range chunks {
		if c.closed {
			break
		}
		c.f.in = append(c.f.in, chunk...)
		r.traffic++
		c.pass()
		for c.lc.busy() && !c.closed {
			select {
			case <-c.woke:
			case <-time.After(50 * time.Millisecond):
				c.lc.st.cancel()
				<-c.woke
			}
			r.traffic++
			c.pass()
		}
	}
	c.hangUp()
	r.out, r.writes, r.closed = c.f.out(), len(c.f.writes), c.closed
	return r
}

// FuzzLoop sends arbitrary bytes through the event loop's batch logic, at
// once and split in two: nothing panics, the output is always a sequence of
// complete RESP values, written once per arrival (and once more per flushAt
// of replies), and unless the framing guard rejects the input or it holds
// a cross-protocol command, the split changes neither the number of
// replies nor whether the connection closes.
func FuzzLoop(f *testing.F) {
	for _, seed := range []string{
		"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n60000\r\n*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nw\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n60000\r\nPING\r\n",
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n",
		"*4\r\n$4\r\nEVAL\r\n$6\r\nreturn\r\n$1\r\n1\r\n$1\r\nk\r\n",
		"*7\r\n$12\r\nLOCK.ACQUIRE\r\n$1\r\nk\r\n$1\r\nt\r\n$6\r\nSHARED\r\n$2\r\nPX\r\n$2\r\n10\r\n$4\r\nWAIT\r\n",
		"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*2\r\n$3\r\nGET\r\n$1\r\nz\r\n",
		"PING\r\nQUIT\r\nPING\r\n",
		"$x y\r\n\r\nECHO \"a b\"\r\n",
		"ECHO \"a\r\n",
		"*1\r\n$4\r\nPINGxx",
		"*3000000000\r\n",
		"*3\r\n$3\r\nDEL\r\n$1\r\nk\r\n$1\r\nz\r\n",
		"PING\r\nPOST / HTTP/1.1\r\nDEL k\r\n",
		"*0\r\n*-1\r\nCOMMAND\r\nCOMMAND\r\nCOMMAND\r\nCOMMAND\r\nCOMMAND\r\nCOMMAND\r\n",
		"SELECT 3\r\nGET k\r\nSELECT 0\r\nEXISTS k\r\nRESET\r\nPTTL k\r\n",
	} {
		f.Add([]byte(seed), uint16(len(seed)/2))
	}
	core, logs := observer.New(zapcore.ErrorLevel)
	s := loopServer(f, func(c *Config) {
		c.Logger = zap.New(core)
		c.MaxValueBytes = 256
		c.Wait = lockmap.WaitPolicy{Rules: []lockmap.WaitRule{{Pattern: "*", Wait: time.Millisecond}}}
	})
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		k := int(split) % (len(data) + 1)
		whole := runLoop(t, s, data)
		parts := runLoop(t, s, data[:k], data[k:])
		var n [2]int
		for i, r := range []loopRun{whole, parts} {
			vals, err := splitReplies(r.out)
			if err != nil {
				t.Fatalf("malformed output %q: %v", r.out, err)
			}
			n[i] = len(vals)
			// One write per arrival, and one more per flushAt of replies
			// and per window of input (peekWindow).
			if r.writes > r.traffic+len(r.out)/flushAt+len(data)/peekWindow {
				t.Fatalf("%d writes for %d arrivals and %d bytes of replies", r.writes, r.traffic, len(r.out))
			}
		}
		if logs.Len() > 0 {
			t.Fatalf("a command panicked: %v", logs.All()[0].ContextMap())
		}
		if wire.NewGuard(maxArgs, int64(s.cfg.MaxCommandBytes), s.cfg.MaxCommandBytes).Feed(data) != nil {
			// Rejected framing closes the connection as soon as the guard
			// sees it; what ran before depends on where the input was split.
			if !whole.closed || !parts.closed {
				t.Fatalf("rejected input left the connection open (whole %v, split %v)", whole.closed, parts.closed)
			}
			return
		}
		if l := bytes.ToLower(data); bytes.Contains(l, []byte("post")) || bytes.Contains(l, []byte("host:")) {
			// A cross-protocol command drops the replies of its batch, as
			// Redis does, and where the batch starts depends on the split.
			return
		}
		if n[0] != n[1] || whole.closed != parts.closed {
			t.Fatalf("at once: %d replies, closed %v; split at %d: %d replies, closed %v\n%q\n%q",
				n[0], whole.closed, k, n[1], parts.closed, whole.out, parts.out)
		}
	})
}
