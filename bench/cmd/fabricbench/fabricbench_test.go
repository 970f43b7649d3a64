package main

import (
	"context"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestTcpfabPairOnMemnodeProcess starts the memory node as make
// bench-fabric does. A memnode refuses to start without a state directory
// (or etcd), so the benchmark must give it one.
func TestTcpfabPairOnMemnodeProcess(t *testing.T) {
	p, stop, err := tcpfabPair(testproc.Bin(t, "memnode"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if p.serverPID == 0 {
		t.Fatal("the pair was not served by a memnode process")
	}
	w := p.worker(0)
	if err := w.ep.Read(context.Background(), w.addr, w.buf[:]); err != nil {
		t.Fatalf("a read over the pair: %v", err)
	}
}
