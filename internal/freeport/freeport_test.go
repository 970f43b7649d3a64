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

// TestPickNeverRepeats: a process never gets the same port twice, although
// each one is free again as soon as Pick returns it. Without the record of
// handed-out ports, 1000 picks from about 22000 would repeat one almost
// surely.
func TestPickNeverRepeats(t *testing.T) {
	if ephemeralLow()-10000 < 1000 {
		t.Skip("the ephemeral range leaves too few ports below it")
	}
	seen := map[int]bool{}
	for range 1000 {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
