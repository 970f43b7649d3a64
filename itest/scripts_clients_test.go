package itest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
	"github.com/shiftlock/shiftlock-proxy/resp/scripts/scripttest"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// The recognised lock scripts (resp/scripts) against the real client
// libraries and a real redis-server: each entry's scenario on redis-server
// with the client's published body, and the real clients' traffic,
// recorded and replayed through the executors. They fetch Go modules and
// npm packages, so they live here and not in the unit tests of scripts.

// TestCatalogueSemantics runs each entry's scenario (scripttest.Run) on
// redis-server with the entry's published body, where this machine has it
// (Go module cache, npm, Debian's redis-py), side by side with the executor;
// the unit tests of scripts run the same scenarios natively only.
func TestCatalogueSemantics(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (make deps installs it)")
	}
	rc := dialRESP(t, "redis-server", startRedis(t))
	bodies, complete := publishedBodies(t)
	ran := map[string]bool{}
	for _, s := range scripts.Catalogue() {
		body, ok := bodies[s.SHA1]
		if !ok {
			continue
		}
		ran[s.ID] = true
		t.Run(s.ID, func(t *testing.T) { scripttest.Run(t, s, rc, body) })
	}
	for _, s := range scripts.Catalogue() {
		if s.Verified == scripts.PublishedBody && !ran[s.ID] && complete {
			t.Errorf("%s is marked as checked with its published body on redis-server, but no body was found", s.ID)
		}
	}
	t.Logf("%d of %d entries also checked against redis-server with the published body", len(ran), len(scripts.Catalogue()))
}

// ---------------------------------------------------------------------------
// Differential tests: real client libraries against a real redis-server,
// through a recording proxy. Every script the libraries send must be in the
// catalogue under its exact SHA1, and replaying the recorded command sequence
// through our executors over the fake lock table must give the replies Redis
// gave (byte for byte, except remaining TTLs, which can only be close).

// startRedis runs a private redis-server and returns its address.
func startRedis(t *testing.T) string { return testproc.Redis(t).Addr }

// recorded is one command and the reply Redis gave to it.
type recorded struct {
	conn  int
	resp3 bool // the connection had switched to RESP3 (HELLO 3) before this command
	cmd   []string
	raw   []byte
	reply wire.Reply
}

// recorder is a TCP proxy that forwards one command at a time and logs it
// with its reply. Clients that pipeline still work: commands are forwarded
// in order and each reply is read before the next command is sent.
type recorder struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	log    []recorded
	conns  []net.Conn
	nconn  int
	wg     sync.WaitGroup
}

func newRecorder(t *testing.T, target string) *recorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln, target: target}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *recorder) addr() string { return r.ln.Addr().String() }

func (r *recorder) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.nconn++
		id := r.nconn
		r.conns = append(r.conns, c, s)
		r.mu.Unlock()
		r.wg.Add(1)
		go r.serve(id, c, s)
	}
}

func (r *recorder) serve(id int, client, server net.Conn) {
	defer r.wg.Done()
	defer client.Close()
	defer server.Close()
	cr, sr := bufio.NewReader(client), bufio.NewReader(server)
	resp3 := false
	for {
		var craw, sraw bytes.Buffer
		cmd, err := wire.ReadReply(cr, &craw)
		if err != nil {
			return
		}
		if _, err := server.Write(craw.Bytes()); err != nil {
			return
		}
		rep, err := wire.ReadReply(sr, &sraw)
		if err != nil {
			return
		}
		if _, err := client.Write(sraw.Bytes()); err != nil {
			return
		}
		args := make([]string, len(cmd.Array))
		for i, a := range cmd.Array {
			args[i] = a.Str
		}
		r.mu.Lock()
		r.log = append(r.log, recorded{conn: id, resp3: resp3, cmd: args, raw: sraw.Bytes(), reply: rep})
		r.mu.Unlock()
		if len(args) > 1 && strings.EqualFold(args[0], "HELLO") && args[1] == "3" && rep.Kind != wire.ReplyError {
			resp3 = true
		}
	}
}

func (r *recorder) close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *recorder) exchanges() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.log...)
}

// closeEnough compares replies, allowing remaining TTLs to differ: the replay
// runs on a frozen clock while Redis's clock kept going.
func closeEnough(got, want wire.Reply, ttl bool) bool {
	if !ttl {
		return reflect.DeepEqual(got, want)
	}
	if got.Kind != want.Kind || len(got.Array) != len(want.Array) || got.Str != want.Str {
		return false
	}
	if got.Kind == wire.ReplyInt {
		if got.Int > 0 && want.Int > 0 {
			d := got.Int - want.Int
			return d >= -2000 && d <= 2000
		}
		return got.Int == want.Int
	}
	for i := range got.Array {
		if !closeEnough(got.Array[i], want.Array[i], ttl) {
			return false
		}
	}
	return true
}

// replay runs the recorded commands against a fresh fake lock table and
// checks every script reply; it returns the catalogue IDs it saw.
func replay(t *testing.T, log []recorded) map[string]bool {
	t.Helper()
	f := scripttest.New()
	seen := map[string]bool{}
	compared := 0
	defer func() { t.Logf("compared %d script replies; scripts seen: %d", compared, len(seen)) }()
	for _, ex := range log {
		cmd := ex.cmd
		if len(cmd) == 0 {
			continue
		}
		var s *scripts.Script
		var keys, argv []string
		switch strings.ToUpper(cmd[0]) {
		case "SET":
			if len(cmd) < 3 {
				continue
			}
			nx, ttl := false, time.Duration(0)
			for i := 3; i < len(cmd); i++ {
				switch strings.ToUpper(cmd[i]) {
				case "NX":
					nx = true
				case "PX", "EX":
					n, _ := strconv.ParseInt(cmd[i+1], 10, 64)
					ttl = time.Duration(n) * time.Millisecond
					if strings.EqualFold(cmd[i], "EX") {
						ttl = time.Duration(n) * time.Second
					}
					i++
				}
			}
			if !nx {
				t.Fatalf("unexpected plain SET in replay: %q", cmd)
			}
			got, _ := f.Acquire([]string{cmd[1]}, cmd[2], ttl, false)
			want := wire.Nil
			if got {
				want = wire.OK
			}
			if !reflect.DeepEqual(want, ex.reply) {
				t.Fatalf("replay diverged at %q: Redis %v, fake %v", cmd, ex.reply, want)
			}
			continue
		case "GET":
			tok, held := f.Get(cmd[1])
			want := wire.Nil
			if held {
				want = wire.Bulk(tok)
			}
			if !reflect.DeepEqual(want, ex.reply) {
				t.Fatalf("replay diverged at %q: Redis %v, fake %v", cmd, ex.reply, want)
			}
			continue
		case "SCRIPT":
			if len(cmd) == 3 && strings.EqualFold(cmd[1], "LOAD") {
				s = recognizeExact(t, cmd[2])
				if ex.reply.Str != s.SHA1 {
					t.Errorf("SCRIPT LOAD returned %v, catalogue says %s", ex.reply, s.SHA1)
				}
				seen[s.ID] = true
			}
			continue
		case "EVALSHA":
			var ok bool
			if s, ok = scripts.LookupSHA(cmd[1]); !ok {
				t.Fatalf("EVALSHA of unknown script %s", cmd[1])
			}
			if ex.reply.Kind == wire.ReplyError && strings.HasPrefix(ex.reply.Str, "NOSCRIPT") {
				continue // the client follows up with EVAL or SCRIPT LOAD
			}
		case "EVAL":
			s = recognizeExact(t, cmd[1])
		default:
			continue // connection set-up: HELLO, CLIENT SETINFO, PING, ...
		}
		seen[s.ID] = true
		n, err := strconv.Atoi(cmd[2])
		if err != nil || n < 0 || 3+n > len(cmd) {
			t.Fatalf("bad numkeys in %q", cmd)
		}
		keys, argv = cmd[3:3+n], cmd[3+n:]
		got := s.Exec(f, keys, argv)
		compared++
		if got.Kind == wire.ReplyError || ex.reply.Kind == wire.ReplyError {
			if got.Kind != ex.reply.Kind || strings.Fields(got.Str)[0] != strings.Fields(ex.reply.Str)[0] {
				t.Errorf("%s %q %q: Redis %v, native %v", s.ID, keys, argv, ex.reply, got)
			}
			continue
		}
		if !closeEnough(got, ex.reply, s.TTLReply) {
			t.Errorf("%s %q %q: Redis %v, native %v", s.ID, keys, argv, ex.reply, got)
			continue
		}
		if enc := wire.AppendReply(nil, got, ex.resp3); !s.TTLReply && !bytes.Equal(enc, ex.raw) {
			t.Errorf("%s (resp3=%v): Redis sent %q, we would send %q", s.ID, ex.resp3, ex.raw, enc)
		}
	}
	return seen
}

// recognizeExact checks that a body a real client sent is catalogued under
// its exact SHA1, and that layout changes still find it through Normalize.
func recognizeExact(t *testing.T, body string) *scripts.Script {
	t.Helper()
	s, ok := scripts.Recognize(body)
	if !ok || s.SHA1 != scripts.SHA1Hex(body) {
		t.Fatalf("real client sent a script not catalogued under its exact SHA1 %s", scripts.SHA1Hex(body))
	}
	if got := scripts.SHA1Hex(scripts.Normalize(body)); got != s.NormSHA1 {
		t.Errorf("%s: NormSHA1 %s, but the real body normalises to %s", s.ID, s.NormSHA1, got)
	}
	mangled := "-- pasted into an application\r\n" +
		strings.NewReplacer("\n", "\r\n    ", "\t", "  ", " ", "   ").Replace(body) + "\n--[[ end ]]\n"
	if _, exact := scripts.LookupSHA(scripts.SHA1Hex(mangled)); exact {
		t.Fatalf("mangling did not change the body")
	}
	if m, ok := scripts.Recognize(mangled); !ok || m.Semantics != s.Semantics {
		t.Errorf("%s: re-indented body not recognised", s.ID)
	}
	return s
}

func expectSeen(t *testing.T, seen map[string]bool, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("the real client never sent %s", id)
		}
	}
}

func TestRealRedsync(t *testing.T) {
	rec := newRecorder(t, startRedis(t))
	client := goredis.NewClient(&goredis.Options{Addr: rec.addr(), Protocol: 3})
	defer client.Close()
	rs := redsync.New(redsyncgoredis.NewPool(client))

	must := func(ok bool, err error, want bool, what string) {
		t.Helper()
		if ok != want {
			t.Fatalf("%s: got %v (%v), want %v", what, ok, err, want)
		}
	}
	m1 := rs.NewMutex("rs-a", redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
	if err := m1.Lock(); err != nil {
		t.Fatal(err)
	}
	ok, err := m1.Extend()
	must(ok, err, true, "owner extends")
	m2 := rs.NewMutex("rs-a", redsync.WithExpiry(10*time.Second), redsync.WithTries(1), redsync.WithValue("intruder"))
	if err := m2.TryLock(); err == nil {
		t.Fatal("second mutex took a held lock")
	}
	ok, err = m2.Extend()
	must(ok, err, false, "non-owner extends")
	ok, err = m2.Unlock()
	must(ok, err, false, "non-owner unlocks")
	ok, err = m1.Unlock()
	must(ok, err, true, "owner unlocks")
	ok, err = m1.Unlock()
	must(ok, err, false, "owner unlocks twice")
	if !errors.Is(err, redsync.ErrLockAlreadyExpired) {
		t.Fatalf("second unlock: %v, want ErrLockAlreadyExpired (the -1 reply)", err)
	}

	m3 := rs.NewMutex("rs-b", redsync.WithExpiry(6*time.Second), redsync.WithTries(1), redsync.WithSetNXOnExtend())
	if err := m3.Lock(); err != nil {
		t.Fatal(err)
	}
	ok, err = m3.Extend()
	must(ok, err, true, "setnx-extend by owner")
	ok, err = m3.Unlock()
	must(ok, err, true, "unlock")
	ok, err = m3.Extend()
	must(ok, err, true, "setnx-extend re-acquires a free lock")
	m4 := rs.NewMutex("rs-b", redsync.WithExpiry(6*time.Second), redsync.WithTries(1), redsync.WithSetNXOnExtend(),
		redsync.WithValue("intruder"))
	ok, err = m4.Extend()
	must(ok, err, false, "setnx-extend by non-owner")
	ok, err = m3.Unlock()
	must(ok, err, true, "final unlock")

	seen := replay(t, rec.exchanges())
	expectSeen(t, seen, "redsync/delete", "redsync/touch", "redsync/touch-setnx")
	checkRealClientEntries(t, seen, "go-redsync/redsync")
}

func TestRealRedislock(t *testing.T) {
	addr := startRedis(t)
	// Both protocols, because nil (a failed obtain or refresh) is encoded
	// differently in RESP2 and RESP3.
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) { redislockScenario(t, addr, proto) })
	}
}

func redislockScenario(t *testing.T, addr string, proto int) {
	rec := newRecorder(t, addr)
	client := goredis.NewClient(&goredis.Options{Addr: rec.addr(), Protocol: proto})
	defer client.Close()
	ctx := context.Background()
	lc := redislock.New(client)

	l1, err := lc.Obtain(ctx, "rl-a", 10*time.Second, &redislock.Options{Token: "tok-1", Metadata: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Obtain(ctx, "rl-a", 10*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("obtained a held lock: %v", err)
	}
	if _, err := lc.Obtain(ctx, "rl-a", 12*time.Second, &redislock.Options{Token: "tok-1", Metadata: "m1"}); err != nil {
		t.Fatalf("re-obtain with the same value: %v", err)
	}
	l2, err := lc.Obtain(ctx, "rl-a", 10*time.Second, &redislock.Options{Token: "tok-1", Metadata: "m2"})
	if err != nil {
		t.Fatalf("re-obtain with new metadata: %v", err)
	}
	if ttl, err := l1.TTL(ctx); err != nil || ttl != 0 {
		t.Fatalf("stale lock TTL = %v, %v (want 0: the -3 reply)", ttl, err)
	}
	if ttl, err := l2.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL = %v, %v", ttl, err)
	}
	if err := l2.Refresh(ctx, 20*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := l1.Refresh(ctx, 20*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("stale refresh: %v", err)
	}
	if err := l1.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Fatalf("stale release: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Fatalf("double release: %v", err)
	}
	if ttl, err := l2.TTL(ctx); err != nil || ttl != 0 {
		t.Fatalf("released lock TTL = %v, %v", ttl, err)
	}

	seen := replay(t, rec.exchanges())
	expectSeen(t, seen, "redislock/obtain-v0.9", "redislock/release", "redislock/refresh", "redislock/pttl")
	checkRealClientEntries(t, seen, "bsm/redislock")
}

// pyDriver exercises redis-py's Lock; it is our own code, driving the
// library installed from Debian (python3-redis).
const pyDriver = `
import sys, redis
from redis.exceptions import LockNotOwnedError
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
a = r.lock("py-a", timeout=10)
assert a.acquire(blocking=False)
b = r.lock("py-a", timeout=10)
assert not b.acquire(blocking=False)
assert a.extend(5)
assert a.extend(20, replace_ttl=True)
assert a.reacquire()
for op in (b.release, lambda: b.extend(1), b.reacquire):
    b.local.token = b"intruder"  # release clears it before running the script
    try:
        op()
        raise SystemExit("non-owner operation succeeded")
    except LockNotOwnedError:
        pass
a.release()
c = r.lock("py-c")
assert c.acquire(blocking=False)
c.timeout = 5
try:
    c.extend(1)
    raise SystemExit("extended a lock without TTL")
except LockNotOwnedError:
    pass
c.release()
print("ok", redis.__version__)
`

func TestRealRedisPy(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	if exec.Command(py, "-c", "import redis.lock").Run() != nil {
		t.Skip("python3-redis not installed (make deps installs it)")
	}
	rec := newRecorder(t, startRedis(t))
	_, port, _ := net.SplitHostPort(rec.addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", pyDriver, port).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-py driver: %v\n%s", err, out)
	}
	t.Logf("redis-py driver: %s", bytes.TrimSpace(out))
	seen := replay(t, rec.exchanges())
	expectSeen(t, seen, "redis-py/release", "redis-py/extend", "redis-py/reacquire")
	checkRealClientEntries(t, seen, "redis-py")
}

// checkRealClientEntries holds the catalogue to its word: every entry of the
// client marked scripts.RealClient must have been sent by the real library.
func checkRealClientEntries(t *testing.T, seen map[string]bool, client string) {
	t.Helper()
	for _, s := range scripts.Catalogue() {
		if s.Verified != scripts.RealClient {
			continue
		}
		for _, c := range s.Clients {
			if c.Name == client && !seen[s.ID] {
				t.Errorf("%s is marked as verified by the real %s, which did not send it", s.ID, client)
			}
		}
	}
}

// publishedBodies collects script bodies from the clients' published packages
// on this machine, keyed by SHA1: Go modules through the module cache (the
// module proxy fills it when needed) and redis-py from Debian's package. The
// text is used in memory only; none of it is stored in the repository. It
// reports whether every source was available.
func publishedBodies(t *testing.T) (map[string]string, bool) {
	t.Helper()
	published.Lock()
	defer published.Unlock()
	if !published.done {
		published.bodies, published.complete = fetchPublishedBodies(t)
		published.done = true
	}
	return published.bodies, published.complete
}

// published keeps the bodies for the test binary's life: the fetch costs
// a module download and five npm packs, and several tests want them.
var published struct {
	sync.Mutex
	done     bool
	bodies   map[string]string
	complete bool
}

func fetchPublishedBodies(t *testing.T) (map[string]string, bool) {
	t.Helper()
	bodies := map[string]string{}
	add := func(body string) { bodies[scripts.SHA1Hex(body)] = body }
	complete := true
	goSources := []struct {
		mod   string
		files []string
	}{
		{"github.com/go-redsync/redsync/v4@v4.11.0", []string{"mutex.go", "scripts.go"}},
		{"github.com/go-redsync/redsync/v4@v4.18.0", []string{"mutex.go", "scripts.go"}},
		{"github.com/go-redsync/redsync/v4@v4.18.1", []string{"mutex.go", "scripts.go"}},
		{"github.com/bsm/redislock@v0.9.4", []string{"redislock.go"}},
		{"github.com/bsm/redislock@v0.10.0", []string{"obtain.lua", "pttl.lua", "refresh.lua", "release.lua"}},
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	for _, src := range goSources {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, gobin, "mod", "download", "-json", src.mod)
		cmd.Dir = t.TempDir() // outside the main module: go.mod and go.sum stay untouched
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		out, err := cmd.Output()
		cancel()
		var info struct{ Dir string }
		if err != nil || json.Unmarshal(out, &info) != nil || info.Dir == "" {
			t.Logf("%s not available (%v): its bodies are not checked on redis-server", src.mod, err)
			complete = false
			continue
		}
		n := 0
		for _, name := range src.files {
			data, err := os.ReadFile(filepath.Join(info.Dir, name))
			if errors.Is(err, os.ErrNotExist) && strings.HasSuffix(name, ".go") {
				continue // the scripts moved from mutex.go to scripts.go in v4.18
			}
			if err != nil {
				t.Fatalf("%s: %v", src.mod, err)
			}
			if strings.HasSuffix(name, ".lua") {
				add(string(data))
				n++
				continue
			}
			for _, body := range newScriptLiterals(t, name, data) {
				add(body)
				n++
			}
		}
		if n == 0 {
			t.Fatalf("%s: no script found in %v", src.mod, src.files)
		}
	}
	jsBodies, ok := npmBodies(t)
	for _, b := range jsBodies {
		add(b)
	}
	complete = complete && ok
	py := "/usr/bin/python3"
	out, err := exec.Command(py, "-c", "import json, redis.lock as l; "+
		"print(json.dumps([getattr(l.Lock, n) for n in dir(l.Lock) if n.startswith('LUA_')]))").Output()
	var pyBodies []string
	if err != nil || json.Unmarshal(out, &pyBodies) != nil {
		t.Logf("redis-py not available (%v)", err)
	}
	for _, b := range pyBodies {
		add(b)
	}
	for sha := range bodies {
		if _, ok := scripts.LookupSHA(sha); !ok {
			t.Errorf("a published body (sha %s) is not in the catalogue", sha)
		}
	}
	return bodies, complete
}

// newScriptLiterals returns the string literals passed to NewScript calls in
// a Go file, evaluated exactly as the compiler does.
func newScriptLiterals(t *testing.T, name string, src []byte) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out []string
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "NewScript" {
			return true
		}
		for _, arg := range call.Args {
			if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				body, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				out = append(out, body)
				break
			}
		}
		return true
	})
	return out
}

// jsScriptConst matches a script constant in node-redlock's published
// JavaScript: a template literal or a quoted string without escapes.
var jsScriptConst = regexp.MustCompile("(?:const|var|let)\\s+\\w*(?:Script|SCRIPT)\\s*=\\s*(`[^`]*`|'[^'\\\\\\n]*'|\"[^\"\\\\\\n]*\")\\s*;")

// npmBodies fetches node-redlock's published tarballs with npm and returns
// the script bodies in them, evaluated as JavaScript evaluates the literals
// (template literals here have no substitutions or escapes; their line
// endings are normalised to LF, as JavaScript does). It reports whether
// every version could be fetched.
func npmBodies(t *testing.T) ([]string, bool) {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Log("npm not installed: node-redlock bodies are not checked on redis-server")
		return nil, false
	}
	var bodies []string
	for _, v := range []string{"3.1.2", "4.0.0", "4.1.0", "4.2.0", "5.0.0-beta.2"} {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		cmd := exec.CommandContext(ctx, npm, "pack", "redlock@"+v, "--silent", "--pack-destination", dir)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		cancel()
		tgz, _ := filepath.Glob(filepath.Join(dir, "*.tgz"))
		if err != nil || len(tgz) != 1 {
			// Most likely no registry: do not wait for it once per version.
			t.Logf("npm pack redlock@%s failed (%v): %s", v, err, bytes.TrimSpace(out))
			return bodies, false
		}
		n := 0
		for name, src := range readTarball(t, tgz[0]) {
			if name != "package/redlock.js" && name != "package/dist/cjs/index.js" {
				continue
			}
			for _, m := range jsScriptConst.FindAllStringSubmatch(src, -1) {
				lit := m[1]
				body := lit[1 : len(lit)-1]
				if lit[0] == '`' {
					if strings.Contains(body, "${") || strings.Contains(body, "\\") {
						t.Fatalf("redlock@%s: template literal needs a JavaScript evaluator", v)
					}
					body = strings.ReplaceAll(strings.ReplaceAll(body, "\r\n", "\n"), "\r", "\n")
				}
				bodies = append(bodies, body)
				n++
			}
		}
		if n != 3 {
			t.Fatalf("redlock@%s: found %d scripts, want 3", v, n)
		}
	}
	return bodies, true
}

func readTarball(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(h.Name, ".js") {
			data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = string(data)
		}
	}
}
