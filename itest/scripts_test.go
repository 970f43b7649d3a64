package itest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// This file drives the recognised lock scripts (resp/scripts) through
// the real proxy binary, side by side with a real redis-server running the
// clients' published bodies, and checks what the scripts leave behind: a
// script that fails must not release or change a hold it did not take.

// respConn speaks RESP2 on a raw connection, because go-redis folds status
// and bulk replies into one Go type, and the scripts' replies differ in it.
type respConn struct {
	t    *testing.T
	name string
	c    net.Conn
	r    *bufio.Reader
}

func dialRESP(t *testing.T, name, addr string) *respConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &respConn{t: t, name: name, c: c, r: bufio.NewReader(c)}
}

// do sends one command and returns its reply; a broken connection fails
// the test, since every later check would be meaningless.
func (rc *respConn) do(args ...string) wire.Reply {
	rc.t.Helper()
	r, err := rc.Do(args...)
	if err != nil {
		rc.t.Fatalf("%s: %q: %v", rc.name, args, err)
	}
	return r
}

// Do is do with the error returned, for callers on other goroutines than
// rc's test (scripttest.Run's subtests).
func (rc *respConn) Do(args ...string) (wire.Reply, error) {
	_ = rc.c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(rc.c, respCmd(args...)); err != nil {
		return wire.Reply{}, err
	}
	return wire.ReadReply(rc.r, nil)
}

func scriptByID(t *testing.T, id string) *scripts.Script {
	t.Helper()
	for _, s := range scripts.Catalogue() {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no catalogue entry %q", id)
	return nil
}

// scriptRunner runs catalogued scripts on one server: by EVAL with the
// published body, or by EVALSHA (after SCRIPT LOAD on redis-server, which
// does not know the SHA otherwise; the proxy knows every catalogued SHA).
type scriptRunner struct {
	rc     *respConn
	redis  bool
	bodies map[string]string
	loaded map[string]bool
}

func (r *scriptRunner) run(s *scripts.Script, eval bool, keys, argv []string) wire.Reply {
	r.rc.t.Helper()
	body, haveBody := r.bodies[s.SHA1]
	var args []string
	switch {
	case eval && haveBody:
		args = []string{"EVAL", body}
	case r.redis && !haveBody:
		r.rc.t.Fatalf("no published body of %s for redis-server", s.ID)
	default:
		if r.redis && !r.loaded[s.SHA1] {
			if got := r.rc.do("SCRIPT", "LOAD", body); got.Str != s.SHA1 {
				r.rc.t.Fatalf("SCRIPT LOAD of %s = %v, want %s", s.ID, got, s.SHA1)
			}
			r.loaded[s.SHA1] = true
		}
		args = []string{"EVALSHA", s.SHA1}
	}
	args = append(args, strconv.Itoa(len(keys)))
	args = append(append(args, keys...), argv...)
	return r.rc.do(args...)
}

// holderFence is the fencing token of key's holder on a proxy (LOCK.INFO),
// 0 if nobody holds it there.
func holderFence(rc *respConn, key string) int64 {
	rc.t.Helper()
	info := rc.do("LOCK.INFO", key)
	for i := 0; i+1 < len(info.Array); i += 2 {
		if info.Array[i].Str != "holders" {
			continue
		}
		for _, h := range info.Array[i+1].Array {
			for j := 0; j+1 < len(h.Array); j += 2 {
				if h.Array[j].Str == "fence" {
					return h.Array[j+1].Int
				}
			}
		}
	}
	return 0
}

// topology is a proxy setup the script tests run against.
type topology struct {
	name  string
	start func(t *testing.T) string // the proxy's RESP address
}

// scriptTopologies: the embedded memory node as an exact try-lock and with
// a wait budget (an acquire of a held key then waits, and on the event loop
// runs again off it), and a memnode process (every verb a round trip;
// owner tags on).
func scriptTopologies(budget string) []topology {
	return []topology{
		{"embedded, try-lock", func(t *testing.T) string { return testproc.Proxy(t, "-acquire-wait", "0s").Addr }},
		{"embedded, wait " + budget, func(t *testing.T) string { return testproc.Proxy(t, "-acquire-wait", budget).Addr }},
		{"memnode process, try-lock", func(t *testing.T) string {
			_, ps := cluster(t, 1, "-acquire-wait", "0s")
			return ps[0].Addr
		}},
	}
}

// side is one server of a side-by-side run.
type side struct {
	name string
	run  *scriptRunner
}

// TestRedislockReobtainKeepsTheHold is issue 32, item 3: bsm/redislock's
// obtain re-obtains a lock whose value starts with the caller's token,
// with new metadata. Redis overwrites the value and the TTL; the proxy
// released the old hold and then failed to take the new one, which left
// the lock free though nobody had released it. Every step runs on the
// proxy and on redis-server with the published body, by EVAL and by
// EVALSHA, and both must give the same replies and the same holders.
func TestRedislockReobtainKeepsTheHold(t *testing.T) {
	bodies, _ := publishedBodies(t)
	obtain := scriptByID(t, "redislock/obtain-v0.9")
	release := scriptByID(t, "redislock/release")
	if _, ok := bodies[obtain.SHA1]; !ok {
		t.Fatal("bsm/redislock v0.9.4's obtain body is not in the module cache (go mod download github.com/bsm/redislock@v0.9.4)")
	}
	obtainMulti := scriptByID(t, "redislock/obtain-v0.10")
	releaseMulti := scriptByID(t, "redislock/release-v0.10")
	_, haveMulti := bodies[obtainMulti.SHA1]
	rs := testproc.Redis(t)
	for _, top := range scriptTopologies("200ms") {
		t.Run(top.name, func(t *testing.T) {
			proxy := top.start(t)
			sides := []side{
				{"proxy", &scriptRunner{rc: dialRESP(t, "proxy", proxy), bodies: bodies}},
				{"redis-server", &scriptRunner{rc: dialRESP(t, "redis-server", rs.Addr), redis: true, bodies: bodies, loaded: map[string]bool{}}},
			}
			sides[1].run.rc.do("FLUSHALL")
			for _, eval := range []bool{true, false} {
				how := map[bool]string{true: "EVAL", false: "EVALSHA"}[eval]
				both := func(s *scripts.Script, keys, argv []string, want wire.Reply) {
					t.Helper()
					for _, sd := range sides {
						if got := sd.run.run(s, eval, keys, argv); got.Kind != want.Kind || got.Str != want.Str || got.Int != want.Int {
							t.Errorf("%s %s %s %v %v = %v, want %v", sd.name, how, s.ID, keys, argv, got, want)
						}
					}
				}
				holds := func(key, want string, maxTTL int64) {
					t.Helper()
					for _, sd := range sides {
						got := sd.run.rc.do("GET", key)
						if (want == "" && got.Kind != wire.ReplyNil) || (want != "" && got.Str != want) {
							t.Errorf("%s %s: GET %s = %v, want %q", sd.name, how, key, got, want)
						}
						if want == "" {
							continue
						}
						// The TTL the last successful obtain set: not more,
						// and not so much less that another one set it.
						if p := sd.run.rc.do("PTTL", key); p.Int > maxTTL || p.Int <= maxTTL/2 {
							t.Errorf("%s %s: PTTL %s = %v, want the %d ms the last obtain set", sd.name, how, key, p, maxTTL)
						}
					}
				}
				ok, null := wire.Reply{Kind: wire.ReplyStatus, Str: "OK"}, wire.Reply{Kind: wire.ReplyNil}
				one, zero := wire.Reply{Kind: wire.ReplyInt, Int: 1}, wire.Reply{Kind: wire.ReplyInt, Int: 0}

				// The fencing token tells a hold kept in place from one
				// released and taken again, which would have let anyone
				// else take the lock in between.
				proxyRC := sides[0].run.rc
				k := "reobtain:" + how
				both(obtain, []string{k}, []string{"foobar", "3", "300000"}, ok)
				holds(k, "foobar", 300000)
				fence := holderFence(proxyRC, k)
				// Same token ("foo"), new metadata: re-obtained in place.
				both(obtain, []string{k}, []string{"foobaz", "3", "300000"}, ok)
				holds(k, "foobaz", 300000)
				if f := holderFence(proxyRC, k); f != fence {
					t.Errorf("%s: the re-obtain moved %s from fence %d to %d: the lock was let go and taken again", how, k, fence, f)
				}
				// The same value again: the TTL is reset, here shortened.
				both(obtain, []string{k}, []string{"foobaz", "3", "30000"}, ok)
				holds(k, "foobaz", 30000)
				// Another token: not obtained, and the hold stays as it was.
				both(obtain, []string{k}, []string{"quxbaz", "3", "300000"}, null)
				holds(k, "foobaz", 30000)
				both(obtain, []string{k}, []string{"fooqux", "4", "300000"}, null)
				holds(k, "foobaz", 30000)
				// The old value no longer holds it; the new one does.
				both(release, []string{k}, []string{"foobar"}, zero)
				holds(k, "foobaz", 30000)
				both(release, []string{k}, []string{"foobaz"}, one)
				holds(k, "", 0)

				if !haveMulti {
					t.Log("bsm/redislock v0.10.0 not in the module cache: multi-key re-obtain not checked")
					continue
				}
				a, b, c := "reobtain:a:"+how, "reobtain:b:"+how, "reobtain:c:"+how
				both(obtainMulti, []string{a, b}, []string{"foobar", "3", "300000"}, ok)
				fa, fb := holderFence(proxyRC, a), holderFence(proxyRC, b)
				both(obtainMulti, []string{a, b}, []string{"foobaz", "3", "300000"}, ok)
				holds(a, "foobaz", 300000)
				holds(b, "foobaz", 300000)
				if f, g := holderFence(proxyRC, a), holderFence(proxyRC, b); f != fa || g != fb {
					t.Errorf("%s: the re-obtain moved fences from %d, %d to %d, %d: the locks were let go and taken again", how, fa, fb, f, g)
				}
				for _, sd := range sides {
					sd.run.rc.do("SET", c, "other", "NX", "PX", "300000")
				}
				// c belongs to someone else: nothing is obtained, and
				// neither a nor c changes.
				both(obtainMulti, []string{a, c}, []string{"fooqux", "3", "30000"}, null)
				holds(a, "foobaz", 300000)
				holds(c, "other", 300000)
				both(obtainMulti, []string{c, a}, []string{"fooqux", "3", "30000"}, null)
				holds(a, "foobaz", 300000)
				holds(c, "other", 300000)
				both(releaseMulti, []string{a, b}, []string{"foobaz"}, ok)
				holds(a, "", 0)
				holds(b, "", 0)
			}
		})
	}
}

// TestScriptsLeaveOtherHoldsAlone runs every recognised script's failure
// paths against a lock held by someone else and checks that the lock is
// still exactly as it was: same holder, same TTL, same fencing token.
//
// The victim holds "victim" with a token beginning with V and a 5-minute
// TTL. The callers present every mix of wrong and empty tokens, TTLs that
// are valid, zero, negative or not numbers, token lengths (bsm/redislock's
// offset) of every sign, and flags, on the victim alone or next to a free
// key (multi-key scripts, in both orders). No caller's value begins with V,
// so no script on redis-server may touch the victim either, whatever the
// offset: Redis compares at least the first byte. Where the published body
// is at hand the replies must also match redis-server's (errors by kind
// only: Redis decorates them, and the proxy's argument-count checks are its
// own). The topologies cover a try-lock, a wait budget that runs out (on
// the event loop, a command that would wait is run again off it) and a
// memory node across the network.
func TestScriptsLeaveOtherHoldsAlone(t *testing.T) {
	bodies, _ := publishedBodies(t)
	// One script per semantics: the entries of one semantics run the same
	// executor. Prefer one whose body redis-server can run.
	var chosen []*scripts.Script
	bySem := map[string]int{}
	for _, s := range scripts.Catalogue() {
		i, seen := bySem[s.Semantics]
		if !seen {
			bySem[s.Semantics] = len(chosen)
			chosen = append(chosen, s)
			continue
		}
		if _, have := bodies[chosen[i].SHA1]; !have {
			if _, ok := bodies[s.SHA1]; ok {
				chosen[i] = s
			}
		}
	}
	tokens := []string{"intruder", ""}
	nums := []string{"120000", "0", "-1", "-9", "x"}
	flags := []string{"yes", "0"}
	var argvs [][]string
	for _, tok := range tokens {
		argvs = append(argvs, []string{tok})
		for _, n := range nums {
			argvs = append(argvs, []string{tok, n})
			for _, n2 := range nums {
				argvs = append(argvs, []string{tok, n, n2})
			}
			for _, f := range flags {
				argvs = append(argvs, []string{tok, n, f})
			}
		}
	}
	const victim, vtoken, vttl = "victim", "V-the-holder", 300000
	rs := testproc.Redis(t)
	for _, top := range scriptTopologies("10ms") {
		t.Run(top.name, func(t *testing.T) {
			proxy := dialRESP(t, "proxy", top.start(t))
			redis := dialRESP(t, "redis-server", rs.Addr)
			redis.do("FLUSHALL")
			pr := &scriptRunner{rc: proxy, bodies: bodies}
			rr := &scriptRunner{rc: redis, redis: true, bodies: bodies, loaded: map[string]bool{}}
			take := func() int64 {
				t.Helper()
				for _, rc := range []*respConn{proxy, redis} {
					rc.do("DEL", victim)
					if r := rc.do("SET", victim, vtoken, "NX", "PX", strconv.Itoa(vttl)); r.Str != "OK" {
						t.Fatalf("%s: the victim's SET = %v", rc.name, r)
					}
				}
				return holderFence(proxy, victim)
			}
			fence := take()
			failures, calls := 0, 0
			for _, s := range chosen {
				shown := 0 // failures reported for s: the first few tell the story
				_, haveBody := bodies[s.SHA1]
				for _, keys := range [][]string{{victim}, {victim, "free"}, {"free", victim}} {
					for i, argv := range argvs {
						calls++
						eval := i%2 == 0
						got := pr.run(s, eval, keys, argv)
						var problems []string
						if haveBody {
							want := rr.run(s, eval, keys, argv)
							ours := got.Kind == wire.ReplyError && strings.Contains(got.Str, "wrong number of arguments for the")
							if !ours && !sameScriptReply(got, want, s.TTLReply) {
								problems = append(problems, fmt.Sprintf("replied %v, redis-server %v", got, want))
							}
							if r := redis.do("GET", victim); r.Str != vtoken {
								t.Fatalf("the test is wrong: on redis-server %s %v %q changed the victim to %v", s.ID, keys, argv, r)
							}
						}
						if r := proxy.do("GET", victim); r.Kind != wire.ReplyBulk || r.Str != vtoken {
							problems = append(problems, fmt.Sprintf("victim now %v", r))
						} else if p := proxy.do("PTTL", victim); p.Int > vttl || p.Int <= vttl/2 {
							problems = append(problems, fmt.Sprintf("victim's PTTL now %v, was set to %d", p, vttl))
						} else if f := holderFence(proxy, victim); f != fence {
							problems = append(problems, fmt.Sprintf("victim's fence now %d, was %d: let go and taken again", f, fence))
						}
						if len(problems) > 0 {
							failures++
							if shown++; shown <= 3 {
								t.Errorf("%s %s %v %q: %s", map[bool]string{true: "EVAL", false: "EVALSHA"}[eval && haveBody], s.ID, keys, argv, strings.Join(problems, "; "))
							}
							fence = take()
						}
						// What the caller may legitimately have taken.
						proxy.do("DEL", "free")
						redis.do("DEL", "free")
					}
				}
			}
			t.Logf("%d script calls on %d scripts (one per semantics), %d touched the victim or replied unlike redis-server", calls, len(chosen), failures)
		})
	}
}

// sameScriptReply compares a proxy's script reply with redis-server's:
// errors by kind only, remaining TTLs within a few seconds.
func sameScriptReply(got, want wire.Reply, ttl bool) bool {
	if got.Kind != want.Kind || len(got.Array) != len(want.Array) {
		return false
	}
	switch got.Kind {
	case wire.ReplyError:
		return true
	case wire.ReplyInt:
		if ttl && got.Int > 0 && want.Int > 0 {
			d := got.Int - want.Int
			return d > -5000 && d < 5000
		}
		return got.Int == want.Int
	case wire.ReplyArray:
		for i := range got.Array {
			if !sameScriptReply(got.Array[i], want.Array[i], ttl) {
				return false
			}
		}
		return true
	}
	return got.Str == want.Str
}

// TestLockExtendNeedsTheHoldersToken: LOCK.EXTEND with an empty token
// extended every holder of the key, as if "" meant "whoever holds it"
// (which is what PEXPIRE means, and only PEXPIRE). It must answer 0 and
// leave another client's lock alone; a hold taken with an empty token is
// still extended by it.
func TestLockExtendNeedsTheHoldersToken(t *testing.T) {
	p := dialRESP(t, "proxy", testproc.Proxy(t).Addr)
	if r := p.do("SET", "k", "holder", "NX", "PX", "300000"); r.Str != "OK" {
		t.Fatalf("SET = %v", r)
	}
	if r := p.do("LOCK.EXTEND", "k", "", "PX", "120000"); r.Kind != wire.ReplyInt || r.Int != 0 {
		t.Errorf("LOCK.EXTEND k \"\" = %v, want 0", r)
	}
	if r := p.do("PTTL", "k"); r.Int <= 150000 {
		t.Errorf("PTTL after LOCK.EXTEND with an empty token = %v, want the holder's 300000", r)
	}
	if r := p.do("LOCK.EXTEND", "k", "holder", "PX", "120000"); r.Int != 1 {
		t.Errorf("LOCK.EXTEND by the holder = %v, want 1", r)
	}
	if r := p.do("PEXPIRE", "k", "200000"); r.Int != 1 {
		t.Errorf("PEXPIRE (any holder, as in Redis) = %v, want 1", r)
	}
	if r := p.do("PTTL", "k"); r.Int <= 150000 || r.Int > 200000 {
		t.Errorf("PTTL after PEXPIRE 200000 = %v", r)
	}
	if r := p.do("SET", "e", "", "NX", "PX", "300000"); r.Str != "OK" {
		t.Fatalf("SET with an empty token = %v", r)
	}
	if r := p.do("LOCK.EXTEND", "e", "", "PX", "120000"); r.Int != 1 {
		t.Errorf("LOCK.EXTEND of an empty-token hold by its token = %v, want 1", r)
	}
}

// TestReobtainMovesOwnerRecognition: with two proxies on one memory node,
// a RedLock client's request through the second proxy is recognised as the
// holder's when it carries the holder's key and token (docs/shiftlock.md,
// "Owners"). After bsm/redislock re-obtains the lock through the first
// proxy under new metadata, the value it holds by is the new one: only that
// value is recognised through the second proxy, and the old one is a
// stranger that waits its budget out.
func TestReobtainMovesOwnerRecognition(t *testing.T) {
	// Tokens as long as a RedLock client's: shorter ones are never
	// recognised through another proxy.
	const oldTok, newTok = "foobar-5f2c9e81d4a7b3", "foobaz-5f2c9e81d4a7b3"
	_, ps := cluster(t, 2, "-acquire-wait", "1s", "-redlock-quorum")
	a, b := dialRESP(t, "proxy a", ps[0].Addr), dialRESP(t, "proxy b", ps[1].Addr)
	obtain := scriptByID(t, "redislock/obtain-v0.9")
	run := &scriptRunner{rc: a}
	if r := run.run(obtain, false, []string{"k"}, []string{oldTok, "3", "300000"}); r.Str != "OK" {
		t.Fatalf("obtain = %v", r)
	}
	fence := holderFence(a, "k")
	if r := run.run(obtain, false, []string{"k"}, []string{newTok, "3", "300000"}); r.Str != "OK" {
		t.Fatalf("re-obtain = %v", r)
	}
	if f := holderFence(a, "k"); f != fence {
		t.Fatalf("the re-obtain moved the fence from %d to %d", fence, f)
	}
	if r := b.do("SET", "k", oldTok, "NX", "PX", "30000"); r.Kind != wire.ReplyNil {
		t.Errorf("the old value through proxy b = %v, want nil: it no longer holds the lock", r)
	}
	if r := b.do("SET", "k", newTok, "NX", "PX", "30000"); r.Str != "OK" {
		t.Errorf("the holder's value through proxy b = %v, want OK (recognised as the holder's)", r)
	}
	if f := holderFence(b, "k"); f != fence {
		t.Errorf("proxy b answers for fence %d, want the holder's %d", f, fence)
	}
}
