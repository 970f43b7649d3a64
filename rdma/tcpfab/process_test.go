package tcpfab

import (
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// These tests run the real cmd/memnode binary as a separate process.

// memnodeProc is the real cmd/memnode binary, started on loopback port 0
// with a metrics endpoint.
type memnodeProc struct {
	*testproc.Proc
	metrics string // the /metrics address it printed
}

func startMemnode(t *testing.T, args ...string) *memnodeProc {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the memnode binary")
	}
	args = append([]string{"-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-entries", "4096", "-state-dir", t.TempDir()}, args...)
	p := testproc.Start(t, "memnode", testproc.Bin(t, "memnode"), args, testproc.MemnodeReady)
	// "metrics on" comes before "memnode listening on", so it is already in
	// the output once the process is ready.
	m := regexp.MustCompile(`(?m)^metrics on (\S+)$`).FindStringSubmatch(p.Output())
	if m == nil {
		t.Fatalf("memnode did not print its metrics address:\n%s", p.Output())
	}
	return &memnodeProc{Proc: p, metrics: m[1]}
}

// metric scrapes /metrics and returns the value of the sample whose line
// starts with name (labels included, as exposed).
func (p *memnodeProc) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		t.Fatalf("metric %s not exposed:\n%s", name, body)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMemnodeProcess: two nodes use every verb and Send against the real
// binary; a silent third is fenced; kill -9 makes the next verb on each node
// fail at once, while their direct Sends keep working.
func TestMemnodeProcess(t *testing.T) {
	// 3 s: the live nodes must never miss it, even on a loaded host.
	p := startMemnode(t, "-heartbeat", "50ms", "-dead-after", "3s")
	ctx := testCtx(t)
	a, b := dial(t, p.Addr, "a"), dial(t, p.Addr, "b")
	silent := dial(t, p.Addr, "silent")
	for _, ep := range []rdma.Endpoint{a, b} {
		hb := rdma.StartHeartbeat(ep, func() time.Duration { return 0 }, nil)
		t.Cleanup(hb.Stop)
	}
	l := a.Layout()
	if l.LockEntries != 4096 || l.HeartbeatInterval != 50*time.Millisecond || l.DeadAfter != 3*time.Second {
		t.Fatalf("layout does not reflect the flags: %+v", l)
	}

	e := l.EntryAddr(5)
	w := make([]byte, 16)
	rdma.U128{Lo: 0x1111, Hi: 0x2222}.PutBytes(w)
	if err := a.Write(ctx, e, w); err != nil {
		t.Fatal(err)
	}
	r := make([]byte, 16)
	if err := b.Read(ctx, e, r); err != nil || rdma.U128From(r) != (rdma.U128{Lo: 0x1111, Hi: 0x2222}) {
		t.Fatalf("read %x %v", r, err)
	}
	check := func(what string, got, want uint64, err error) {
		t.Helper()
		if err != nil || got != want {
			t.Fatalf("%s: old %#x err %v, want %#x", what, got, err, want)
		}
	}
	old, err := a.CAS(ctx, e, 0x1111, 0x3333)
	check("CAS", old, 0x1111, err)
	old, err = b.FAA(ctx, e, 2)
	check("FAA", old, 0x3333, err)
	old, err = a.MaskedCAS64(ctx, e, 0, 0, 0xF0, 0xF0) // fetch-and-store of bits 4..7
	check("MaskedCAS64", old, 0x3335, err)
	old, err = b.MaskedFAA64(ctx, e, 0x10, 0x80) // field 0..7 wraps: 0xF5+0x10 = 0x05
	check("MaskedFAA64", old, 0x33F5, err)
	o128, err := a.MaskedCAS128(ctx, e, rdma.U128{Hi: 0x2222}, rdma.U128{Hi: ^uint64(0)}, rdma.U128{Lo: 7, Hi: 9}, rdma.U128{Lo: 0xF, Hi: 0xF})
	if err != nil || o128 != (rdma.U128{Lo: 0x3305, Hi: 0x2222}) {
		t.Fatalf("MaskedCAS128: %v %v", o128, err)
	}
	o128, err = b.MaskedFAA128(ctx, e, rdma.U128{Lo: 1, Hi: 1}, rdma.U128{Lo: 1 << 63})
	if err != nil || o128 != (rdma.U128{Lo: 0x3307, Hi: 0x2229}) {
		t.Fatalf("MaskedFAA128: %v %v", o128, err)
	}
	var bt rdma.Batch
	i1 := bt.FAA(e, 1)
	i2 := bt.FAA(e, 1)
	rd := make([]byte, 16)
	bt.Read(e, rd)
	if err := a.Post(ctx, &bt); err != nil || bt.FirstErr() != nil {
		t.Fatal(err, bt.FirstErr())
	}
	if bt.Old64(i1) != 0x3308 || bt.Old64(i2) != 0x3309 || rdma.U128From(rd) != (rdma.U128{Lo: 0x330A, Hi: 0x222A}) {
		t.Fatalf("batch: %#x %#x %x", bt.Old64(i1), bt.Old64(i2), rd)
	}

	// Sends both ways.
	var ia, ib rdma.Inbox
	ta, cha, _ := ia.Open()
	tb, chb, _ := ib.Open()
	a.Bind(ia.Deliver)
	b.Bind(ib.Deliver)
	exchange := func(round byte) {
		t.Helper()
		if err := a.Send(ctx, b.Node(), tb, rdma.Payload{round, 'a'}); err != nil {
			t.Fatalf("a→b: %v", err)
		}
		if err := b.Send(ctx, a.Node(), ta, rdma.Payload{round, 'b'}); err != nil {
			t.Fatalf("b→a: %v", err)
		}
		if m := <-chb; m.From != a.Node() || m.To != tb || m.Payload != (rdma.Payload{round, 'a'}) {
			t.Fatalf("b received %+v", m)
		}
		if m := <-cha; m.From != b.Node() || m.To != ta || m.Payload != (rdma.Payload{round, 'b'}) {
			t.Fatalf("a received %+v", m)
		}
	}
	exchange(1)

	// The silent node is declared dead and fenced; the beating ones are not.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := silent.FAA(ctx, l.EntryAddr(6), 1)
		if errors.Is(err, rdma.ErrFenced) && errors.Is(err, rdma.ErrUnreachable) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("silent node: %v (want fenced eventually)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	old, err = a.FAA(ctx, l.EntryAddr(6), 0)
	if err != nil || old == 0 {
		t.Fatalf("live node after the silent one was fenced: %d %v", old, err)
	}

	// The binary's metrics saw all this.
	if v := p.metric(t, `rdma_verbs_total{direction="in",node="0",role="memnode",verb="masked_cas"}`); v < 2 {
		t.Fatalf("memnode counted %v masked CAS", v)
	}
	if v := p.metric(t, "memnode_members"); v != 2 {
		t.Fatalf("memnode_members = %v, want 2", v)
	}
	if v := p.metric(t, "memnode_deaths_total"); v != 1 {
		t.Fatalf("memnode_deaths_total = %v, want 1", v)
	}

	// kill -9: the next verb on each node fails with ErrUnreachable instead
	// of hanging (ctx allows 20s; the endpoints' own timeout is 10s).
	p.Kill()
	for _, ep := range []rdma.Endpoint{a, b} {
		start := time.Now()
		_, err := ep.FAA(ctx, l.EntryAddr(7), 1)
		if !errors.Is(err, rdma.ErrUnreachable) {
			t.Fatalf("verb after kill -9: %v", err)
		}
		t.Logf("node %d: verb failed %v after the kill: %v", ep.Node(), time.Since(start).Round(time.Microsecond), err)
	}
	// Sends go node to node: they do not need the memory node.
	exchange(2)
}

// TestMemnodeSIGTERM: the binary shuts down gracefully, exits 0, and its
// members' verbs fail with ErrUnreachable.
func TestMemnodeSIGTERM(t *testing.T) {
	p := startMemnode(t, "-log-level", "debug")
	a := dial(t, p.Addr, "a")
	mustFAA(t, a, 1, 0)
	if err := p.Stop(20 * time.Second); err != nil {
		t.Fatalf("memnode exit after SIGTERM: %v\n%s", err, p.Output())
	}
	if !strings.Contains(p.Output(), "shutting down") {
		t.Fatalf("no shutdown log:\n%s", p.Output())
	}
	if _, err := a.FAA(testCtx(t), a.Layout().EntryAddr(1), 1); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("verb after the memnode stopped: %v", err)
	}
}
