package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"regexp"

	"github.com/tidwall/redcon"
)

// The null server is the proxy's front end with the lock taken out: the same
// RESP library (redcon, one goroutine per connection) answering SET with +OK
// and EVALSHA with :1 without doing anything. Its throughput against Redis
// on the distinct-keys workload is the ceiling any lock work can only lower,
// measured in the same run, so a missed target can be told apart from the
// cost of Go's network stack on a machine the load generator shares.
func serveNull(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("null server listening on %s\n", ln.Addr())
	return redcon.Serve(ln, func(c redcon.Conn, cmd redcon.Command) {
		switch name := cmd.Args[0]; {
		case bytes.EqualFold(name, []byte("hello")):
			// Unknown, as on Redis 5: clients fall back to RESP2.
			c.WriteError("ERR unknown command 'hello'")
		case bytes.EqualFold(name, []byte("evalsha")), bytes.EqualFold(name, []byte("eval")):
			c.WriteInt(1)
		default:
			c.WriteString("OK")
		}
	}, nil, nil)
}

// nullReady is the null server's line giving its address.
var nullReady = regexp.MustCompile(`null server listening on (\S+)`)

// startNull runs this binary again as a null server, in its own process like
// the two targets it is compared with.
func startNull() (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return start(self, []string{"-serve-null", "127.0.0.1:0"}, nullReady, "")
}
