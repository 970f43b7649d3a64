package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPick: the port is below the ephemeral range, where the kernel
// never assigns one on its own, and can be bound.
func TestPick(t *testing.T) {
	lo := ephemeralLow()
	for range 20 {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if p >= lo || p < 1024 {
			t.Fatalf("port %d outside [1024, %d)", p, lo)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d cannot be bound: %v", p, err)
		}
		ln.Close()
	}
}
