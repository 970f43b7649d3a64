package itest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// expectRefusedStart runs bin with args and checks that it exits before it
// serves, saying what is wrong and how to fix it.
func expectRefusedStart(t *testing.T, name, bin string, args []string) {
	t.Helper()
	ready := testproc.MemnodeReady
	if name == "proxy" {
		ready = testproc.ProxyReady
	}
	p, err := testproc.Launch(name, bin, args, ready, 30*time.Second)
	if err == nil {
		p.Kill()
		t.Fatalf("%s %v started without a fabric secret:\n%s", name, args, p.Output())
	}
	for _, fix := range []string{"fabric_secret_file", "-fabric-secret-file", "fabric_insecure", "-fabric-insecure", "127.0.0.1"} {
		if !strings.Contains(err.Error(), fix) {
			t.Fatalf("%s %v refused to start without saying how to fix it (no %q):\n%v", name, args, fix, err)
		}
	}
}

// expectInsecureWarning waits for p, started with fabric_insecure, to warn
// that its fabric is open. It logs that before it says it listens, but on
// stderr, which is read apart from stdout.
func expectInsecureWarning(t *testing.T, p *testproc.Proc) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(p.Output(), "\n") {
			if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "fabric_insecure") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s serving an open fabric on purpose did not warn about it:\n%s", p.Name, p.Output())
		}
	}
}

// TestMemnodeRefusesOpenFabric: without a fabric secret, anyone who reaches
// the memory node's port owns every lock, so the memnode will not serve a
// non-loopback address without one, in either mode (alone or with etcd),
// unless told fabric_insecure, which it then says loudly. On loopback, and
// with a secret, it starts as before.
func TestMemnodeRefusesOpenFabric(t *testing.T) {
	bin := testproc.Bin(t, "memnode")
	for _, args := range [][]string{
		{"-listen", "0.0.0.0:0"},
		{"-listen", ":0"},
		{"-listen", "[::]:0"},
		{"-listen", "0.0.0.0:0", "-etcd", "127.0.0.1:1", "-shard", "default"},
	} {
		if !slices.Contains(args, "-etcd") {
			args = append(args, "-state-dir", t.TempDir())
		}
		expectRefusedStart(t, "memnode", bin, append(args, "-metrics", ""))
	}

	p := testproc.Start(t, "memnode", bin, []string{"-listen", "0.0.0.0:0", "-metrics", "", "-fabric-insecure", "-state-dir", t.TempDir()}, testproc.MemnodeReady)
	expectInsecureWarning(t, p)
	testproc.Start(t, "memnode", bin, []string{"-listen", "0.0.0.0:0", "-metrics", "", "-fabric-secret-file", writeFabricSecret(t), "-state-dir", t.TempDir()}, testproc.MemnodeReady)
	testproc.Memnode(t) // loopback, no secret: the single-host default
}

// TestProxyRefusesOpenPeerPort: a proxy's peer port hands its waiters
// locks, and a memory node across the network serves its lock table to
// anyone without a secret. So a proxy without fabric_secret_file refuses a
// non-loopback peer_listen, and a memory node that is not on loopback,
// unless told fabric_insecure; with a secret (on both sides) it serves.
func TestProxyRefusesOpenPeerPort(t *testing.T) {
	mn := testproc.Memnode(t, "-entries", "4096")
	bin := testproc.Bin(t, "proxy")
	base := []string{"-listen", "127.0.0.1:0", "-metrics", ""}
	for _, args := range [][]string{
		{"-memnode", mn.Addr, "-peer-listen", "0.0.0.0:0"},
		{"-memnode", mn.Addr, "-peer-listen", ":0"},
		{"-memnode", "192.0.2.1:7300"}, // TEST-NET-1: a memory node across the network
		{"-memnode", mn.Addr + ",192.0.2.1:7300"},
	} {
		expectRefusedStart(t, "proxy", bin, append(append([]string(nil), base...), args...))
	}

	p := testproc.Proxy(t, "-memnode", mn.Addr, "-peer-listen", "0.0.0.0:0", "-fabric-insecure")
	expectInsecureWarning(t, p)

	secret := writeFabricSecret(t)
	smn := testproc.Memnode(t, "-entries", "4096", "-fabric-secret-file", secret)
	sp := testproc.Proxy(t, "-memnode", smn.Addr, "-peer-listen", "0.0.0.0:0", "-fabric-secret-file", secret)
	if ok, err := client(t, sp.Addr).SetNX(ctxT(t, time.Minute), "k", "v", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SET NX through a proxy with a secret and an open peer port: %v %v", ok, err)
	}
}

// TestProxyRefusesOpenShard: with memory nodes found through etcd, the
// proxy learns where the shard's memory node is only when it joins; one
// across the network, with no fabric secret, is refused then, at once and
// with the fix, rather than joined or retried for a minute.
func TestProxyRefusesOpenShard(t *testing.T) {
	etcd := testproc.Etcd(t, 1)
	endpoints := strings.Join(etcd.Endpoints(), ",")
	port := testproc.FreePort(t)
	// On loopback, but advertised to proxies as an address across the
	// network (TEST-NET-1), as a memory node on another host is.
	testproc.Start(t, "memnode", testproc.Bin(t, "memnode"), []string{
		"-listen", fmt.Sprintf("127.0.0.1:%d", port), "-advertise", fmt.Sprintf("192.0.2.1:%d", port),
		"-metrics", "", "-entries", "4096", "-etcd", endpoints,
	}, testproc.MemnodeReady)
	expectRefusedStart(t, "proxy", testproc.Bin(t, "proxy"), []string{"-listen", "127.0.0.1:0", "-metrics", "",
		"-etcd", endpoints, "-shard", "default"})
}
