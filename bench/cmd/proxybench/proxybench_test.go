package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// resp encodes a command as a client sends it.
func resp(args ...string) string { return string(wire.AppendCommand(nil, args...)) }

// TestNullServers: a ceiling is only a ceiling if the workload runs on it
// exactly as on the proxy, replies included, and both null servers must
// answer alike: through a client, and byte for byte on a raw connection
// with pipelined, split and malformed input.
func TestNullServers(t *testing.T) {
	bin := testproc.Bin(t, "proxybench")
	for _, kind := range nullKinds {
		t.Run(kind, func(t *testing.T) {
			p := testproc.Start(t, "null "+kind, bin, []string{"-serve-null", "127.0.0.1:0", "-null-kind", kind}, nullReady)
			c := redis.NewClient(&redis.Options{Addr: p.Addr})
			defer c.Close()
			ctx := context.Background()
			ok, err := c.SetNX(ctx, "k", "tok", time.Second).Result()
			if err != nil || !ok {
				t.Fatalf("SET NX = %v, %v; want true", ok, err)
			}
			n, err := release.Run(ctx, c, []string{"k"}, "tok").Int()
			if err != nil || n != 1 {
				t.Fatalf("release = %v, %v; want 1", n, err)
			}
			if err := c.Do(ctx, "HELLO", "3").Err(); err == nil || !strings.Contains(err.Error(), "unknown command 'hello'") {
				t.Fatalf("HELLO = %v; want unknown command, as on Redis 5", err)
			}

			conn, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rd := bufio.NewReader(conn)
			expect := func(want string) {
				t.Helper()
				got := make([]byte, len(want))
				if _, err := io.ReadFull(rd, got); err != nil || string(got) != want {
					t.Fatalf("replies %q, %v; want %q", got, err, want)
				}
			}
			// Many commands in one write, more than one read of the
			// server takes, must come back complete and in order.
			var in, want strings.Builder
			for i := range 2000 {
				if i%2 == 0 {
					in.WriteString(resp("SET", fmt.Sprint("key", i), "tok", "NX", "PX", "30000"))
					want.WriteString("+OK\r\n")
				} else {
					in.WriteString(resp("EVALSHA", "0123456789abcdef0123456789abcdef01234567", "1", "key", "tok"))
					want.WriteString(":1\r\n")
				}
			}
			in.WriteString(resp("hello", "3") + "PING\r\n")
			want.WriteString("-ERR unknown command 'hello'\r\n+OK\r\n")
			if _, err := conn.Write([]byte(in.String())); err != nil {
				t.Fatal(err)
			}
			expect(want.String())
			// A command cut in two is answered once it is whole.
			cmd := resp("SET", "k", "v", "NX")
			if _, err := conn.Write([]byte(cmd[:7])); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // let the first part be read on its own (the test holds either way)
			if _, err := conn.Write([]byte(cmd[7:] + resp("EVAL", "return 1", "0"))); err != nil {
				t.Fatal(err)
			}
			expect("+OK\r\n:1\r\n")
			// Garbage is a protocol error, and the connection is closed.
			if _, err := conn.Write([]byte("*1\r\n$x\r\n")); err != nil {
				t.Fatal(err)
			}
			line, err := rd.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "-ERR Protocol error") {
				t.Fatalf("malformed input: %q, %v; want a protocol error", line, err)
			}
			if rest, err := rd.ReadString('\n'); err != io.EOF {
				t.Fatalf("after a protocol error: %q, %v; want the connection closed", rest, err)
			}

			r, err := throughput(ctx, &proc{cmd: p.Cmd, addr: p.Addr}, 4, time.Second)
			if err != nil || r.rate <= 0 || r.cpu.server <= 0 || r.cpu.gen <= 0 {
				t.Fatalf("throughput = %+v, %v; want cycles, and the server's and proxybench's CPU per cycle", r, err)
			}
		})
	}
}

func TestVariantFlag(t *testing.T) {
	var l variantList
	if err := l.Set("proxy-redcon=-frontend redcon  -log-level warn"); err != nil {
		t.Fatal(err)
	}
	if len(l) != 1 || l[0].name != "proxy-redcon" || strings.Join(l[0].args, ",") != "-frontend,redcon,-log-level,warn" {
		t.Fatalf("parsed %+v", l)
	}
	for _, bad := range []string{"proxy-redcon=-x", "redis=-x", "proxy=", "null gnet=-x", "=-x", "noflags"} {
		if err := l.Set(bad); err == nil {
			t.Errorf("-variant %q accepted", bad)
		}
	}
	if err := l.Set("plain="); err != nil || len(l) != 2 || len(l[1].args) != 0 {
		t.Fatalf("a variant without flags: %v, %+v", err, l)
	}
	if err := l.Set("old=@/tmp/proxy-old -procs 2"); err != nil || len(l) != 3 || l[2].bin != "/tmp/proxy-old" || strings.Join(l[2].args, ",") != "-procs,2" {
		t.Fatalf("a variant with its own binary: %v, %+v", err, l)
	}
	if err := l.Set("nobin=@ -procs 2"); err == nil {
		t.Error("-variant with an empty @ accepted")
	}
}

// TestOrdered: over a cycle of the design's rows, every target runs in
// every place equally often and follows every other target equally often,
// for any number of targets; and the target list the report reads keeps
// its order (redis first, then the proxy).
func TestOrdered(t *testing.T) {
	for n := 1; n <= 7; n++ {
		ts := make([]*target, n)
		for i := range ts {
			ts[i] = &target{name: fmt.Sprint(i)}
		}
		rows := len(williams(n))
		places := map[[2]string]int{}
		follows := map[[2]string]int{}
		for r := 0; r < rows; r++ {
			got := ordered(ts, r)
			seen := map[string]bool{}
			for i, x := range got {
				if x == nil || seen[x.name] {
					t.Fatalf("n=%d run %d: %v is not a permutation", n, r, got)
				}
				seen[x.name] = true
				places[[2]string{x.name, fmt.Sprint(i)}]++
				if i > 0 {
					follows[[2]string{got[i-1].name, x.name}]++
				}
			}
		}
		for _, a := range ts {
			for i := 0; i < n; i++ {
				if c := places[[2]string{a.name, fmt.Sprint(i)}]; c != rows/n {
					t.Errorf("n=%d: target %s in place %d %d times over %d runs, want %d", n, a.name, i, c, rows, rows/n)
				}
			}
			for _, b := range ts {
				if a == b || n < 2 {
					continue
				}
				if c := follows[[2]string{a.name, b.name}]; c != rows/n {
					t.Errorf("n=%d: %s right before %s %d times over %d runs, want %d", n, a.name, b.name, c, rows, rows/n)
				}
			}
		}
		if ts[0].name != "0" {
			t.Errorf("n=%d: ordered reordered its input", n)
		}
	}
	if got := len(williams(3)); got != 6 {
		t.Errorf("a design for 3 targets (redis, the proxy, one variant) has %d rows, want 6", got)
	}
	if ordered(nil, 3) != nil {
		t.Error("ordered(nil) is not nil")
	}
}

// TestSmoke runs the whole tool briefly against the real proxy, a variant
// of it, Redis and both null servers, and checks that the report has every
// section, target and verdict. It asserts no timing: the numbers of so
// short a run mean nothing.
func TestSmoke(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found (make test installs it: scripts/install-deps.sh)")
	}
	bin, proxy := testproc.Bin(t, "proxybench"), testproc.Bin(t, "proxy")
	out, err := exec.Command(bin, "-proxy-bin", proxy, "-runs", "1", "-clients", "8", "-latency-cycles", "200",
		"-throughput-time", "300ms", "-hot-time", "1s", "-variant", "proxy-quiet=-log-level error", "-node-dir", "../../../itest/node").Output()
	if err != nil {
		t.Fatalf("proxybench: %v\n%s", err, out)
	}
	report := string(out)
	for _, want := range []string{
		"; proxy-quiet, the proxy with `-log-level error`.",
		"| null redcon |", "| null gnet |", "server CPU per cycle | proxybench CPU per cycle |",
		"server CPU per acquisition | proxybench CPU per acquisition |",
		"- proxy: acquisitions/s", "- proxy-quiet: acquisitions/s", "### Targets (issue 11)",
		"| uncontended SET NX PX + release, p50 at most 1.0x redis's | proxy |",
		"| distinct keys, cycles/s at least 1.2x redis's | proxy |",
		"| distinct keys, server CPU per cycle at most redis's (1.0x) | proxy-quiet |",
		"| bound: distinct keys, cycles/s against redis's with no lock work | null gnet |",
		"| bound: distinct keys, server CPU per cycle against redis's with no lock work | null redcon |",
		"### 3b. 8 clients on one hot key, redsync v4 defaults, holding 0", "- proxy: acquisitions/s", "p99",
		"### 4. One multiplexed connection: node-redlock v4 on ioredis, 16 workers, one hot key",
		"- proxy-quiet: wall time",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	// Every target in every workload's table.
	for _, name := range []string{"redis", "proxy", "proxy-quiet"} {
		if n := len(regexp.MustCompile(`(?m)^\| `+name+` \|`).FindAllString(report, -1)); n != 5 {
			t.Errorf("%d table rows for %s, want 5 (one per workload):\n%s", n, name, report)
		}
	}
	// The multiplexed connection took every turn on every target.
	for _, name := range []string{"redis", "proxy", "proxy-quiet"} {
		if !regexp.MustCompile(`(?m)^\| ` + name + ` \| [\d.]+ ms \| [^|]+ \| [\d.]+ ms \| [\d.]+ ms \| 240 \| [^|]+ \| 0 of 1 runs \|`).MatchString(report) {
			t.Errorf("no complete multiplexed-connection row for %s:\n%s", name, report)
		}
	}
	// Every client of the proxy's hot key must have had the lock: waiting
	// is FIFO, so a one-second run starves nobody.
	row := regexp.MustCompile(`(?m)^\| proxy \| \d+ \|.*\| \d+ \| (\d+) / \d+ / \d+ \|`).FindStringSubmatch(report)
	if row == nil {
		t.Fatalf("no proxy hot-key row:\n%s", report)
	}
	if row[1] == "0" {
		t.Errorf("a proxy client never acquired the hot key:\n%s", report)
	}
}
