package resp

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/lockmap/maptest"
	"github.com/shiftlock/shiftlock-proxy/memnode"
)

// testServer is a Server over an embedded memory node, without a network.
func testServer(tb testing.TB, password string) (*Server, *observer.ObservedLogs) {
	tb.Helper()
	m, _ := maptest.Embedded(tb, memnode.Config{Entries: 1 << 10, DeadAfter: time.Hour}, lockmap.Config{})
	core, logs := observer.New(zapcore.ErrorLevel)
	s := New(Config{Map: m, Password: password, Logger: zap.New(core), MaxValueBytes: 256,
		Wait: lockmap.WaitPolicy{Rules: []lockmap.WaitRule{{Pattern: "*", Wait: time.Millisecond}}}})
	return s, logs
}

func newConn(s *Server) *connState {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	return s.newConnState(ctx, cancel)
}

// readValue consumes one RESP2/RESP3 value from r, or fails.
func readValue(r *bufio.Reader) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return fmt.Errorf("bad line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-', ':', '_':
		return nil
	case '$', '=':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad length %q", body)
		}
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := r.Read(buf); err != nil {
			return err
		}
		if string(buf[n:]) != "\r\n" {
			return fmt.Errorf("bulk of %d not terminated", n)
		}
		return nil
	case '*', '%':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad count %q", body)
		}
		if line[0] == '%' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			if err := readValue(r); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown type %q", line[0])
}

// FuzzCommand sends arbitrary RESP through the command layer: no input may
// panic, and every reply must be exactly one well-formed value.
func FuzzCommand(f *testing.F) {
	for _, seed := range []string{
		"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n",
		"*6\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nex\r\n$1\r\n8\r\n$2\r\nnx\r\n",
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"*3\r\n$7\r\nPEXPIRE\r\n$1\r\nk\r\n$2\r\n-1\r\n",
		"*4\r\n$4\r\nEVAL\r\n$6\r\nreturn\r\n$1\r\n9\r\n$1\r\nk\r\n",
		"*3\r\n$7\r\nEVALSHA\r\n$40\r\n0000000000000000000000000000000000000000\r\n$2\r\n-1\r\n",
		"*7\r\n$12\r\nLOCK.ACQUIRE\r\n$1\r\nk\r\n$1\r\nt\r\n$6\r\nSHARED\r\n$2\r\nPX\r\n$2\r\n10\r\n$4\r\nWAIT\r\n",
		"*2\r\n$9\r\nLOCK.INFO\r\n$1\r\nk\r\n",
		"*4\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$1\r\nx\r\n",
		"*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$3\r\na b\r\n",
		"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$3\r\nfoo\r\n",
		"*2\r\n$4\r\nINFO\r\n$5\r\nlocks\r\n",
		"*1\r\n$7\r\nCOMMAND\r\n",
		"PING\r\n",
	} {
		f.Add([]byte(seed))
	}
	s, logs := testServer(f, "")
	f.Fuzz(func(t *testing.T, data []byte) {
		// As on a connection: the guard sees the bytes before the parser.
		if s.newGuard().Feed(data) != nil {
			return
		}
		var cmds []cmdArgs
		var p cmdParser
		for in := data; len(in) > 0; {
			args, used, err := p.next(in)
			if err != nil || used == 0 {
				break // a quoting error, or the end of the complete commands
			}
			in = in[used:]
			if len(args) > 0 {
				cmds = append(cmds, cmdArgs{Args: args})
			}
		}
		st := newConn(s)
		defer st.cancel()
		for _, cmd := range cmds {
			st.w.resp3 = st.resp3
			st.w.reset()
			s.exec(st, cmd.Args)
			if st.attack {
				return // closed without a reply, as for Redis
			}
			if len(st.w.b) == 0 {
				t.Fatalf("no reply to %q", cmd.Args)
			}
			r := bufio.NewReader(bytes.NewReader(st.w.b))
			if err := readValue(r); err != nil {
				t.Fatalf("malformed reply %q to %q: %v", st.w.b, cmd.Args, err)
			}
			if rest, _ := r.Peek(1); len(rest) > 0 {
				t.Fatalf("reply %q to %q has trailing bytes", st.w.b, cmd.Args)
			}
		}
		if logs.Len() > 0 {
			t.Fatalf("a command panicked: %v", logs.All()[0].ContextMap())
		}
	})
}

// cmdArgs is one parsed command.
type cmdArgs struct{ Args [][]byte }
