package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"syscall"

	"github.com/panjf2000/gnet/v2"
	"github.com/tidwall/redcon"
)

// A null server is a RESP front end with the lock taken out: it answers SET
// with +OK and EVALSHA with :1 without doing anything. Its throughput and
// CPU against Redis on the distinct-keys workload are the ceiling any lock
// work can only lower, measured in the same run, so a missed target can be
// told apart from the cost of the network stack on a machine the load
// generator shares. There are two, one per way of serving RESP in Go:
// redcon (the proxy's library, one goroutine per connection) and gnet v2
// (event loops over epoll, with redcon's parser and appenders).

// nullKinds are the null servers, in the order they are reported.
var nullKinds = []string{"redcon", "gnet"}

// nullReply is the null servers' one decision, shared so that both answer
// every command alike.
type nullReply int

const (
	replyOK nullReply = iota
	replyOne
	replyNoHello
)

func nullAnswer(name []byte) nullReply {
	switch {
	case bytes.EqualFold(name, []byte("hello")):
		// Unknown, as on Redis 5: clients fall back to RESP2.
		return replyNoHello
	case bytes.EqualFold(name, []byte("evalsha")), bytes.EqualFold(name, []byte("eval")):
		return replyOne
	}
	return replyOK
}

const noHello = "ERR unknown command 'hello'"

// nullReady is a null server's line giving its address.
var nullReady = regexp.MustCompile(`null server listening on (\S+)`)

func serveNull(kind, addr string, loops int) error {
	switch kind {
	case "redcon":
		return serveNullRedcon(addr)
	case "gnet":
		return serveNullGnet(addr, loops)
	}
	return fmt.Errorf("unknown null server %q (want redcon or gnet)", kind)
}

func serveNullRedcon(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("null server listening on %s\n", ln.Addr())
	return redcon.Serve(ln, func(c redcon.Conn, cmd redcon.Command) {
		switch nullAnswer(cmd.Args[0]) {
		case replyNoHello:
			c.WriteError(noHello)
		case replyOne:
			c.WriteInt(1)
		default:
			c.WriteString("OK")
		}
	}, nil, nil)
}

// gnetNull serves the null answers from gnet event loops. Each wake-up
// answers every complete command buffered on the connection with one
// write, and nothing is allocated per command: the reply and argument
// buffers belong to the connection and are reused.
type gnetNull struct {
	gnet.BuiltinEventEngine
}

type gnetConn struct {
	out  []byte
	args [][]byte
}

func serveNullGnet(addr string, loops int) error {
	return gnet.Run(&gnetNull{}, "tcp://"+addr, gnet.WithNumEventLoop(loops))
}

// OnBoot prints the address actually bound (the port may have been 0).
func (*gnetNull) OnBoot(eng gnet.Engine) gnet.Action {
	fd, err := eng.Dup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "null server:", err)
		return gnet.Shutdown
	}
	defer syscall.Close(fd)
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "null server:", err)
		return gnet.Shutdown
	}
	var addr string
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		addr = net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	case *syscall.SockaddrInet6:
		addr = net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	}
	fmt.Printf("null server listening on %s\n", addr)
	return gnet.None
}

func (*gnetNull) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	c.SetContext(&gnetConn{})
	return nil, gnet.None
}

func (*gnetNull) OnTraffic(c gnet.Conn) gnet.Action {
	st := c.Context().(*gnetConn)
	in, _ := c.Peek(-1)
	out, rest, action := st.out[:0], in, gnet.None
	for {
		complete, args, _, left, err := redcon.ReadNextCommand(rest, st.args)
		if err != nil {
			out, action = redcon.AppendError(out, "ERR "+err.Error()), gnet.Close
			break
		}
		if !complete {
			break // the rest of this command has not arrived; it stays buffered
		}
		st.args, rest = args[:0], left
		if len(args) == 0 {
			continue
		}
		switch nullAnswer(args[0]) {
		case replyNoHello:
			out = redcon.AppendError(out, noHello)
		case replyOne:
			out = redcon.AppendInt(out, 1)
		default:
			out = redcon.AppendOK(out)
		}
	}
	// Discard(0) would discard everything buffered.
	if n := len(in) - len(rest); n > 0 {
		_, _ = c.Discard(n)
	}
	if len(out) > 0 {
		// gnet writes now or copies what the socket did not take, so out
		// can be reused at once.
		_, _ = c.Write(out)
	}
	st.out = out
	return action
}

// startNull runs this binary again as a null server, in its own process like
// the targets it is compared with.
func startNull(kind string, loops int) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return start(self, []string{"-serve-null", "127.0.0.1:0", "-null-kind", kind, "-null-loops", strconv.Itoa(loops)}, nullReady, "")
}
