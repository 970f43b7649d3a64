package resp

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
)

// fakeOps is an in-memory lock table with a manual clock, so TTLs are exact
// and expiry happens only when a test advances time.
type fakeOps struct {
	mu    sync.Mutex
	now   time.Time
	locks map[string]fakeLock
	err   error // when set, every mutating call fails with it
	// pinned keys' holds cannot change hands in place (a shadow or a
	// routed share in the real lock table): Reassign refuses them.
	pinned map[string]bool
}

type fakeLock struct {
	token   string
	expires time.Time // zero: no TTL
}

func newFake() *fakeOps {
	return &fakeOps{now: time.Unix(1_700_000_000, 0), locks: map[string]fakeLock{}}
}

func (f *fakeOps) live(key string) (fakeLock, bool) {
	l, ok := f.locks[key]
	if ok && !l.expires.IsZero() && !f.now.Before(l.expires) {
		delete(f.locks, key)
		return fakeLock{}, false
	}
	return l, ok
}

func (f *fakeOps) deadline(ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return f.now.Add(ttl)
}

func (f *fakeOps) Get(key string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.live(key)
	return l.token, ok
}

func (f *fakeOps) Acquire(keys []string, token string, ttl time.Duration, reentrant bool) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	for _, k := range keys {
		if l, ok := f.live(k); ok && !(reentrant && l.token == token) {
			return false, nil
		}
	}
	for _, k := range keys {
		f.locks[k] = fakeLock{token, f.deadline(ttl)}
	}
	return true, nil
}

func (f *fakeOps) Release(key, token string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	if l, ok := f.live(key); ok && l.token == token {
		delete(f.locks, key)
		return true, nil
	}
	return false, nil
}

func (f *fakeOps) Extend(key, token string, ttl time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	if ttl <= 0 {
		return false, errors.New("fake: Extend with non-positive TTL")
	}
	if l, ok := f.live(key); ok && l.token == token {
		f.locks[key] = fakeLock{token, f.deadline(ttl)}
		return true, nil
	}
	return false, nil
}

func (f *fakeOps) Reassign(keys, from []string, token string, ttl time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	if ttl <= 0 {
		return false, errors.New("fake: Reassign with non-positive TTL")
	}
	for i, k := range keys {
		if l, ok := f.live(k); !ok || l.token != from[i] || f.pinned[k] {
			return false, nil
		}
	}
	for _, k := range keys {
		f.locks[k] = fakeLock{token, f.deadline(ttl)}
	}
	return true, nil
}

func (f *fakeOps) PTTL(key string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.live(key)
	switch {
	case !ok:
		return -2, nil
	case l.expires.IsZero():
		return -1, nil
	}
	return l.expires.Sub(f.now).Milliseconds(), nil
}

// set puts a lock in place directly; ttl 0 means no TTL.
func (f *fakeOps) set(key, token string, ttl time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.locks[key] = fakeLock{token, f.deadline(ttl)}
}

func (f *fakeOps) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// checker runs a scenario step by step against the executor over the fake
// lock table and, when the client's published body is at hand, the same
// steps against a real redis-server running that body, so that every
// expected value is checked against Redis too.
type checker struct {
	t    *testing.T
	s    *Script
	f    *fakeOps
	rc   *rawConn // nil: native only
	body string
}

func (c *checker) redis(args ...string) Reply {
	c.t.Helper()
	r, err := c.rc.do(args...)
	if err != nil {
		c.t.Fatalf("redis %q: %v", args, err)
	}
	return r
}

// set puts a lock in place on both sides; ttl 0 means no TTL.
func (c *checker) set(key, token string, ttl time.Duration) {
	c.f.set(key, token, ttl)
	if c.rc != nil {
		if ttl > 0 {
			c.redis("SET", key, token, "PX", strconv.FormatInt(ttl.Milliseconds(), 10))
		} else {
			c.redis("SET", key, token)
		}
	}
}

// advance moves the fake clock; Redis's keys are aged by as much.
func (c *checker) advance(d time.Duration) {
	c.f.advance(d)
	if c.rc == nil {
		return
	}
	for _, key := range c.redis("KEYS", "*").Array {
		p := c.redis("PTTL", key.Str).Int
		switch {
		case p < 0:
		case p <= d.Milliseconds():
			c.redis("DEL", key.Str)
		default:
			c.redis("PEXPIRE", key.Str, strconv.FormatInt(p-d.Milliseconds(), 10))
		}
	}
}

// nativeOnly runs steps where the executor deliberately differs from Redis
// (documented in docs/compatibility.md), then copies the fake's state to Redis.
func (c *checker) nativeOnly(steps func()) {
	rc := c.rc
	c.rc = nil
	steps()
	c.rc = rc
	if rc == nil {
		return
	}
	c.redis("FLUSHALL")
	c.f.mu.Lock()
	locks := make(map[string]fakeLock, len(c.f.locks))
	for key, l := range c.f.locks {
		locks[key] = l
	}
	now := c.f.now
	c.f.mu.Unlock()
	for key, l := range locks {
		if l.expires.IsZero() {
			c.redis("SET", key, l.token)
		} else if rem := l.expires.Sub(now).Milliseconds(); rem > 0 {
			c.redis("SET", key, l.token, "PX", strconv.FormatInt(rem, 10))
		}
	}
}

// sameAsExpected compares a real Redis reply with a scenario's expectation:
// remaining TTLs may be off by the time the test took (up to 1.5 s, for a
// loaded host), and Redis decorates script errors with the script's location.
func sameAsExpected(got, want Reply) bool {
	switch {
	case want.Kind == ReplyError:
		if got.Kind != ReplyError {
			return false
		}
		phrase := strings.TrimPrefix(strings.TrimPrefix(want.Str, "ERR "), "user_script: ")
		return strings.HasPrefix(got.Str, "ERR ") && strings.Contains(got.Str, phrase)
	case got.Kind != want.Kind || got.Str != want.Str || len(got.Array) != len(want.Array):
		return false
	case got.Kind == ReplyInt && want.Int > 100:
		return got.Int <= want.Int && got.Int > want.Int-1500
	}
	for i := range got.Array {
		if !sameAsExpected(got.Array[i], want.Array[i]) {
			return false
		}
	}
	return got.Kind != ReplyInt || got.Int == want.Int
}

func (c *checker) want(keys, argv []string, want Reply) {
	c.t.Helper()
	got := c.s.Exec(c.f, keys, argv)
	if want.Kind == ReplyError {
		if got.Kind != ReplyError || !strings.HasPrefix(got.Str, want.Str) {
			c.t.Errorf("%s %v %v = %v, want error %q...", c.s.ID, keys, argv, got, want.Str)
		}
	} else if !reflect.DeepEqual(got, want) {
		c.t.Errorf("%s %v %v = %v, want %v", c.s.ID, keys, argv, got, want)
	}
	if c.rc == nil || want.Str == errArgs.Str {
		return // argument-count errors are ours; Redis has no such check
	}
	args := append([]string{"EVAL", c.body, strconv.Itoa(len(keys))}, keys...)
	if r := c.redis(append(args, argv...)...); !sameAsExpected(r, want) {
		c.t.Errorf("%s %v %v: redis-server running the published body replied %v, scenario expects %v",
			c.s.ID, keys, argv, r, want)
	}
}

func (c *checker) holder(key, want string) {
	c.t.Helper()
	tok, held := c.f.Get(key)
	switch {
	case want == "" && held:
		c.t.Errorf("%s: %s held by %q, want free", c.s.ID, key, tok)
	case want != "" && (!held || tok != want):
		c.t.Errorf("%s: %s held=%v by %q, want %q", c.s.ID, key, held, tok, want)
	}
	if c.rc != nil {
		r := c.redis("GET", key)
		if (want == "" && r.Kind != ReplyNil) || (want != "" && r.Str != want) {
			c.t.Errorf("%s: in Redis %s = %v, want %q", c.s.ID, key, r, want)
		}
	}
}

func (c *checker) pttl(key string, want int64) {
	c.t.Helper()
	if got, _ := c.f.PTTL(key); got != want {
		c.t.Errorf("%s: PTTL %s = %d, want %d", c.s.ID, key, got, want)
	}
	if c.rc != nil {
		if r := c.redis("PTTL", key); !sameAsExpected(r, intReply(want)) {
			c.t.Errorf("%s: in Redis PTTL %s = %v, want about %d", c.s.ID, key, r, want)
		}
	}
}

// rawConn speaks RESP2 directly, because go-redis folds statuses and bulk
// strings into one Go type and the difference matters here.
type rawConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c, bufio.NewReader(c)}
}

func (rc *rawConn) do(args ...string) (Reply, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := rc.c.Write(b.Bytes()); err != nil {
		return Reply{}, err
	}
	var raw bytes.Buffer
	return readRESP(rc.r, &raw)
}

func k(keys ...string) []string { return keys }
func a(argv ...string) []string { return argv }

const sec = time.Second

var (
	errNotInt = errorReply("ERR value is not an integer")
	errExpire = errorReply("ERR invalid expire time in 'set'")
	errArith  = errorReply("ERR user_script: attempt to perform arithmetic")
	errArgs   = errorReply("ERR wrong number of arguments")
)

// semanticsTests holds, for each Semantics, a scenario over a fresh fake
// lock table that covers held-by-token, held-by-other, missing, TTL and
// argument cases. Every catalogue entry runs the scenario of its Semantics.
var semanticsTests = map[string]func(c *checker){
	"release": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("other"), intReply(0))
		c.holder("l", "tok")
		c.want(k("l"), a("tok"), intReply(1))
		c.holder("l", "")
		c.want(k("l"), a("tok"), intReply(0))
		c.set("l", "tok", sec)
		c.advance(2 * sec)
		c.want(k("l"), a("tok"), intReply(0))
	},
	"release-tristate": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("other"), intReply(0))
		c.want(k("l"), a("tok"), intReply(1))
		c.want(k("l"), a("tok"), intReply(-1))
		c.want(k("l"), a(""), intReply(-1))
	},
	"extend": func(c *checker) {
		c.set("l", "tok", sec)
		c.want(k("l"), a("tok", "5000"), intReply(1))
		c.pttl("l", 5000)
		c.want(k("l"), a("other", "9000"), intReply(0))
		c.pttl("l", 5000)
		c.want(k("m"), a("tok", "9000"), intReply(0))
		c.want(k("l"), a("tok", "abc"), errNotInt)
		c.want(k("l"), a("other", "abc"), intReply(0)) // Redis never parses the TTL here
		c.want(k("l"), a("tok", "+5"), errNotInt)
		c.nativeOnly(func() { // Redis takes TTLs past time.Duration's range (292 years)
			c.want(k("l"), a("tok", "99999999999999999"), errorReply("ERR invalid expire time in 'pexpire'"))
		})
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok", "700"), intReply(1))
		c.pttl("p", 700)
		c.want(k("l"), a("tok", "0"), intReply(1)) // PEXPIRE 0 deletes
		c.holder("l", "")
		c.want(k("p"), a("tok", "-5"), intReply(1))
		c.holder("p", "")
	},
	"extend-or-acquire": func(c *checker) {
		c.set("l", "tok", sec)
		c.want(k("l"), a("tok", "5000"), intReply(1))
		c.pttl("l", 5000)
		c.want(k("l"), a("other", "5000"), intReply(0))
		c.holder("l", "tok")
		c.want(k("m"), a("tok", "3000"), intReply(1))
		c.holder("m", "tok")
		c.pttl("m", 3000)
		c.want(k("l"), a("tok", "x"), errNotInt)
		c.want(k("l"), a("other", "x"), errNotInt)
		c.want(k("n"), a("tok", "0"), errExpire)
		c.holder("n", "")
		c.want(k("l"), a("tok", "0"), intReply(1))
		c.holder("l", "")
	},
	"pttl-or-minus3": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("tok"), intReply(10000))
		c.advance(1500 * time.Millisecond)
		c.want(k("l"), a("tok"), intReply(8500))
		c.want(k("l"), a("other"), intReply(-3))
		c.want(k("m"), a("tok"), intReply(-3))
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok"), intReply(-1))
	},
	"obtain-prefix": func(c *checker) {
		c.want(k("l"), a("tok1meta", "4", "10000"), okReply)
		c.holder("l", "tok1meta")
		c.pttl("l", 10000)
		c.advance(sec)
		c.want(k("l"), a("tok1meta", "4", "20000"), okReply) // same value: TTL reset
		c.pttl("l", 20000)
		c.want(k("l"), a("tok1other", "4", "5000"), okReply) // same token, new metadata
		c.holder("l", "tok1other")
		c.pttl("l", 5000)
		c.want(k("l"), a("tok2meta", "4", "5000"), nilReply)
		c.holder("l", "tok1other")
		c.want(k("l"), a("tok1other", "0", "5000"), nilReply) // empty prefix vs whole value
		c.want(k("l"), a("tok1", "x", "5000"), errArith)
		c.want(k("l"), a("tok1", "1.5", "5000"), errNotInt)
		c.want(k("l"), a("tok1other", "4", "x"), errNotInt)
		c.want(k("m"), a("tok1", "4", "0"), errExpire)
		c.holder("m", "")
		c.want(k("m"), a("tok1", "4", "-1"), errExpire)
		c.want(k("l"), a("tok1other", "99", "5000"), okReply) // offset past the end compares whole strings
		c.nativeOnly(func() {
			// A negative token length makes Redis compare the holder's
			// value without its last bytes: it would hand the lock to a
			// value that shares no token with it. Refused, hold untouched.
			c.want(k("l"), a("tok1othe", "-1", "5000"), errorReply("ERR the token length"))
			c.holder("l", "tok1other")
			c.pttl("l", 5000)
			// A hold that cannot change hands in place (a shadow, a routed
			// share): the re-obtain fails and the hold stays as it was.
			c.f.pinned = map[string]bool{"l": true}
			c.want(k("l"), a("tok1new", "4", "9000"), nilReply)
			c.holder("l", "tok1other")
			c.pttl("l", 5000)
			c.f.pinned = nil
		})
	},
	"obtain-multi-prefix": func(c *checker) {
		c.want(k("a", "b"), a("tokAm", "4", "10000"), okReply)
		c.holder("a", "tokAm")
		c.holder("b", "tokAm")
		c.advance(sec)
		c.want(k("a", "b"), a("tokAm", "4", "10000"), okReply)
		c.pttl("b", 10000)
		c.want(k("a", "b"), a("tokAn", "4", "7000"), okReply)
		c.holder("a", "tokAn")
		c.pttl("a", 7000)
		c.want(k("a", "b"), a("tokBm", "4", "7000"), nilReply)
		c.set("c", "other", 10*sec)
		c.want(k("d", "c"), a("tokAm", "4", "7000"), nilReply)
		c.holder("d", "")
		c.want(k("a", "d"), a("tokAn", "4", "7000"), nilReply) // partly held, partly free: no
		c.holder("d", "")
		c.nativeOnly(func() { // Redis would MSETNX first and leave e and f set without TTL
			c.want(k("e", "f"), a("tokAm", "4", "x"), errNotInt)
			c.holder("e", "")
		})
		c.want(k("e", "f"), a("tokAm", "4", "0"), okReply) // set and deleted at once
		c.holder("e", "")
		c.want(k("a", "b"), a("tokAn", "x", "1000"), errArith)
		c.want(k("a", "b"), a("tokAx", "4", "x"), errNotInt)
		c.want(k("a", "b"), a("tokBx", "4", "x"), nilReply)
		c.want(k("a", "b"), a("tokAx", "4", "0"), okReply)
		c.holder("a", "")
		c.holder("b", "")
		c.want(k("g", "g"), a("tokG", "4", "1000"), okReply)
		c.holder("g", "tokG")
		c.set("h", "tokHm", 10*sec)
		c.set("i", "tokHm", 10*sec)
		c.nativeOnly(func() {
			c.want(k("h", "i"), a("tokH", "-1", "5000"), errorReply("ERR the token length"))
			c.holder("h", "tokHm")
			c.pttl("h", 10000)
			// One key cannot change hands in place: neither does the other.
			c.f.pinned = map[string]bool{"i": true}
			c.want(k("h", "i"), a("tokHn", "4", "5000"), nilReply)
			c.holder("h", "tokHm")
			c.holder("i", "tokHm")
			c.pttl("h", 10000)
			c.f.pinned = nil
		})
	},
	"release-all": func(c *checker) {
		c.set("a", "tok", 10*sec)
		c.set("b", "tok", 10*sec)
		c.set("c", "other", 10*sec)
		c.want(k("a", "c"), a("tok"), nilReply)
		c.holder("a", "tok")
		c.want(k("a", "x"), a("tok"), nilReply)
		c.want(k("a", "b", "a"), a("tok"), okReply)
		c.holder("a", "")
		c.holder("b", "")
		c.want(k("a"), a("tok"), nilReply)
	},
	"refresh-all": func(c *checker) {
		c.set("a", "tok", sec)
		c.set("b", "tok", 0)
		c.set("c", "other", sec)
		c.want(k("a", "b"), a("tok", "5000"), okReply)
		c.pttl("a", 5000)
		c.pttl("b", 5000)
		c.want(k("a", "c"), a("tok", "9000"), nilReply)
		c.pttl("a", 5000)
		c.want(k("a", "c"), a("tok", "x"), nilReply)
		c.want(k("a", "b"), a("tok", "x"), errNotInt)
		c.want(k("a"), a("tok", "0"), okReply)
		c.holder("a", "")
	},
	"min-pttl-all": func(c *checker) {
		c.set("a", "tok", 5*sec)
		c.set("b", "tok", 3*sec)
		c.set("p", "tok", 0)
		c.set("q", "tok", 0)
		c.want(k("a", "b"), a("tok"), intReply(3000))
		c.want(k("a", "p"), a("tok"), intReply(5000))
		c.want(k("p", "q"), a("tok"), intReply(0))
		c.want(k("a", "x"), a("tok"), nilReply)
		c.want(k("a"), a("other"), nilReply)
	},
	"py-extend": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("tok", "5000", "0"), intReply(1))
		c.pttl("l", 15000)
		c.want(k("l"), a("tok", "5000", "1"), intReply(1))
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "4000"), intReply(1)) // no ARGV[3]: replace
		c.pttl("l", 4000)
		c.want(k("l"), a("tok", " 1e3 ", "0"), intReply(1)) // Lua coerces the string
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "x", "1"), errNotInt)
		c.want(k("l"), a("tok", "x", "0"), errArith)
		c.want(k("l"), a("tok", "0.5", "0"), errNotInt)
		c.want(k("l"), a("other", "5000", "1"), intReply(0))
		c.want(k("m"), a("tok", "5000", "1"), intReply(0))
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok", "5000", "1"), intReply(0)) // no TTL: cannot extend
		c.want(k("l"), a("tok", "-6000", "0"), intReply(1))
		c.holder("l", "")
	},
	"py-extend-add": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("tok", "5000"), intReply(1))
		c.pttl("l", 15000)
		c.want(k("l"), a("tok", "0x10"), intReply(1))
		c.pttl("l", 15016)
		c.want(k("l"), a("tok", "x"), errArith)
		c.want(k("l"), a("other", "5000"), intReply(0))
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok", "5000"), intReply(0))
		c.want(k("m"), a("tok", "5000"), intReply(0))
	},
	"py-acquire": func(c *checker) {
		c.want(k("l"), a("tok", "5000"), intReply(1))
		c.holder("l", "tok")
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "5000"), intReply(0))
		c.want(k("l"), a("other", ""), intReply(0))
		c.want(k("m"), a("tok", ""), intReply(1))
		c.pttl("m", -1)
		c.nativeOnly(func() { // Redis would SETNX first and leave n set without TTL
			c.want(k("n"), a("tok", "x"), errNotInt)
			c.holder("n", "")
		})
		c.want(k("l"), a("tok", "x"), intReply(0))
		c.want(k("n"), a("tok", "0"), intReply(1))
		c.holder("n", "")
	},
	"set-nx-px": func(c *checker) {
		c.want(k("l"), a("tok", "5000"), okReply)
		c.holder("l", "tok")
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "5000"), nilReply)
		c.want(k("l"), a("other", "5000"), nilReply)
		c.want(k("m"), a("tok", "x"), errNotInt)
		c.want(k("m"), a("tok", "0"), errExpire)
		c.want(k("l"), a("tok", "0"), errExpire)
		c.holder("m", "")
	},
	"acquire-all": func(c *checker) {
		c.want(k("a", "b"), a("tok", "5000"), intReply(2))
		c.holder("b", "tok")
		c.pttl("a", 5000)
		c.want(k("a", "b"), a("tok", "5000"), intReply(0)) // exists, even for the same token
		c.set("c", "other", 10*sec)
		c.want(k("d", "c"), a("tok", "5000"), intReply(0))
		c.holder("d", "")
		c.want(k("e", "e"), a("tok", "5000"), intReply(2))
		c.want(k(), a(), intReply(0))
		c.want(k("f"), a("tok"), errArgs)
		c.want(k("f"), a("tok", "x"), errNotInt)
		c.want(k("c"), a("tok", "x"), intReply(0))
		c.want(k("f"), a("tok", "0"), errExpire)
		c.holder("f", "")
	},
	"extend-all": func(c *checker) {
		c.set("a", "tok", sec)
		c.set("b", "tok", 0)
		c.set("c", "other", sec)
		c.want(k("a", "b"), a("tok", "5000"), intReply(2))
		c.pttl("b", 5000)
		c.want(k("a", "c"), a("tok", "9000"), intReply(0))
		c.want(k("a", "x"), a("tok", "9000"), intReply(0))
		c.pttl("a", 5000)
		c.want(k("a", "a", "b"), a("tok", "6000"), intReply(3))
		c.want(k("a"), a("tok", "x"), errNotInt)
		c.want(k("c"), a("tok", "x"), intReply(0))
		c.want(k("a"), a("tok", "0"), errExpire)
		c.want(k(), a(), intReply(0))
		c.want(k("a"), a("tok"), errArgs)
	},
	"release-each": func(c *checker) {
		c.set("a", "tok", sec)
		c.set("b", "tok", sec)
		c.set("c", "other", sec)
		c.want(k("a", "b", "c", "x"), a("tok"), intReply(2))
		c.holder("c", "other")
		c.holder("a", "")
		c.set("a", "tok", sec)
		c.want(k("a", "a"), a("tok"), intReply(1))
		c.want(k(), a(), intReply(0))
		c.want(k("a"), a(), errArgs)
	},
	"redlock-rb-lock": func(c *checker) {
		c.want(k("l"), a("tok", "5000", "yes"), okReply)
		c.holder("l", "tok")
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "8000", "yes"), okReply)
		c.pttl("l", 8000)
		c.want(k("l"), a("tok", "9000", "no"), okReply)
		c.pttl("l", 9000)
		c.want(k("l"), a("other", "5000", "yes"), nilReply)
		c.want(k("m"), a("tok", "5000", "no"), nilReply)
		c.want(k("m"), a("tok", "5000"), nilReply)
		c.holder("m", "")
		c.want(k("m"), a("tok", "x", "yes"), errNotInt)
		c.want(k("m"), a("tok", "x", "no"), nilReply)
		c.want(k("l"), a("tok", "x", "no"), errNotInt)
		c.want(k("l"), a("other", "0", "yes"), nilReply)
		c.want(k("m"), a("tok", "0", "yes"), errExpire)
	},
	"get-and-pttl": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), nil, arrayReply(bulkReply("tok"), intReply(10000)))
		c.want(k("m"), a("ignored"), arrayReply(nilReply, intReply(-2)))
		c.set("p", "other", 0)
		c.want(k("p"), nil, arrayReply(bulkReply("other"), intReply(-1)))
	},
	"pttl-or-zero": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("tok"), intReply(10000))
		c.want(k("l"), a("other"), intReply(0))
		c.want(k("m"), a("tok"), intReply(0))
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok"), intReply(0))
	},
}

// TestCatalogueSemantics runs each entry's scenario natively and, for the
// entries whose published body this machine has (Go module cache, Debian's
// redis-py), also on redis-server with that very body.
func TestCatalogueSemantics(t *testing.T) {
	var rc *rawConn
	var bodies map[string]string
	complete := false
	if _, err := exec.LookPath("redis-server"); err == nil {
		rc = dialRaw(t, startRedis(t))
		bodies, complete = publishedBodies(t)
	} else {
		t.Log("redis-server not installed: scenarios run natively only")
	}
	ran := map[string]bool{}
	for _, s := range Catalogue() {
		t.Run(s.ID, func(t *testing.T) {
			run, ok := semanticsTests[s.Semantics]
			if !ok {
				t.Fatalf("no scenario for semantics %q", s.Semantics)
			}
			c := &checker{t: t, s: s, f: newFake()}
			if body, ok := bodies[s.SHA1]; ok {
				c.rc, c.body = rc, body
				c.redis("FLUSHALL")
				ran[s.ID] = true
			}
			run(c)
		})
	}
	if rc == nil {
		return
	}
	for _, s := range Catalogue() {
		if s.Verified == PublishedBody && !ran[s.ID] && complete {
			t.Errorf("%s is marked as checked with its published body on redis-server, but no body was found", s.ID)
		}
	}
	t.Logf("%d of %d entries also checked against redis-server with the published body", len(ran), len(catalogue))
}

func TestArgumentValidation(t *testing.T) {
	for _, s := range Catalogue() {
		c := &checker{t: t, s: s, f: newFake()}
		if s.MinKeys > 0 {
			c.want(nil, a("tok", "1000", "1000"), errArgs)
		}
		if s.MinArgs > 0 {
			c.want(k("l"), nil, errArgs)
			c.want(k("l"), make([]string, s.MinArgs-1), errArgs)
		}
	}
}

// TestExecNeverPanics feeds every entry awkward arguments over several lock
// states: the reply must be a well-formed value, never a panic.
func TestExecNeverPanics(t *testing.T) {
	pool := []string{"", "tok", "0", "-1", "1", "1000", "x", " 7 ", "1e3", "0x1F", "1.5", "-0",
		"99999999999999999999", "9223372036854775807", "-9223372036854775808", "inf", "nan", "yes", "no"}
	for _, s := range Catalogue() {
		for i := 0; i < 400; i++ {
			f := newFake()
			if i%3 == 0 {
				f.set("a", "tok", sec)
			}
			if i%5 == 0 {
				f.set("b", "other", 0)
			}
			nk := i % 4
			keys := []string{"a", "b", "a"}[:min(nk, 3)]
			argv := []string{pool[i%len(pool)], pool[(i/3)%len(pool)], pool[(i/7)%len(pool)]}[:i%4]
			r := s.Exec(f, keys, argv)
			if r.Kind > ReplyError {
				t.Fatalf("%s %v %v: bad reply kind %d", s.ID, keys, argv, r.Kind)
			}
			if r.Kind == ReplyError && !regexp.MustCompile(`^[A-Z]+ `).MatchString(r.Str) {
				t.Fatalf("%s %v %v: error without code: %q", s.ID, keys, argv, r.Str)
			}
		}
	}
}

func TestLockTableErrorsBecomeReplies(t *testing.T) {
	for _, s := range Catalogue() {
		f := newFake()
		f.set("a", "tok", sec)
		f.err = errors.New("lock table unavailable")
		r := s.Exec(f, k("a", "b"), a("tok", "1000", "1000"))
		if r.Kind == ReplyError && r.Str != "ERR lock table unavailable" {
			t.Errorf("%s: error reply %q", s.ID, r.Str)
		}
	}
	f := newFake()
	f.err = errors.New("WRONGTYPE not a lock")
	s, _ := LookupSHA("c3f8721cbb97f72bc19e972846bd7aaf91901658")
	if r := s.Exec(f, k("a"), a("tok")); r.Str != "WRONGTYPE not a lock" {
		t.Errorf("coded error not kept: %v", r)
	}
}

var hex40 = regexp.MustCompile(`^[0-9a-f]{40}$`)

func TestCatalogueConsistency(t *testing.T) {
	seenSHA := map[string]string{}
	normSemantics := map[string]string{}
	ids := map[string]bool{}
	for _, s := range Catalogue() {
		if ids[s.ID] {
			t.Errorf("duplicate ID %s", s.ID)
		}
		ids[s.ID] = true
		if !hex40.MatchString(s.SHA1) || !hex40.MatchString(s.NormSHA1) {
			t.Errorf("%s: malformed SHA1s %q %q", s.ID, s.SHA1, s.NormSHA1)
		}
		// One exact body is one entry; clients that send the same bytes are
		// listed together on it.
		if other, dup := seenSHA[s.SHA1]; dup {
			t.Errorf("%s and %s have the same exact SHA1 %s: merge them", s.ID, other, s.SHA1)
		}
		seenSHA[s.SHA1] = s.ID
		if sem, ok := normSemantics[s.NormSHA1]; ok && sem != s.Semantics {
			t.Errorf("%s: same normalised body as a %q entry but semantics %q", s.ID, sem, s.Semantics)
		}
		normSemantics[s.NormSHA1] = s.Semantics
		if s.SHA1 == s.NormSHA1 {
			t.Errorf("%s: exact and normalised SHA1 coincide; a real body always has whitespace to drop", s.ID)
		}
		if len(s.Clients) == 0 || s.Family == "" || s.Op == "" || s.Replies == "" || s.exec == nil {
			t.Errorf("%s: incomplete entry", s.ID)
		}
		if s.Verified != RealClient && s.Verified != PublishedBody && s.Verified != SourceHash {
			t.Errorf("%s: verification not set", s.ID)
		}
		if got, ok := LookupSHA(strings.ToUpper(s.SHA1)); !ok || got != s {
			t.Errorf("%s: LookupSHA (upper case) failed", s.ID)
		}
		if got, ok := byNorm[s.NormSHA1]; !ok || got.Semantics != s.Semantics {
			t.Errorf("%s: normalised lookup broken", s.ID)
		}
	}
	if _, ok := LookupSHA(SHA1Hex(ownScript)); ok {
		t.Error("our own script must not be recognised")
	}
	if _, ok := Recognize(ownScript); ok {
		t.Error("our own script must not be recognised after normalisation")
	}
}

func TestUnsupportedScriptError(t *testing.T) {
	r := UnsupportedScriptError("ABCDEF0123456789abcdef0123456789ABCDEF01")
	if r.Kind != ReplyError {
		t.Fatalf("kind %d", r.Kind)
	}
	for _, want := range []string{
		"ERR this is a lock proxy; unsupported script (sha abcdef0123456789abcdef0123456789abcdef01). Supported: ",
		"redsync v4 delete/touch/touch-or-acquire",
		"redislock release/refresh/pttl/obtain",
		"redis-py Lock release/extend/reacquire/acquire",
		"node-redlock v3-v5 acquire/extend/release",
		"redlock-rb lock/unlock/pttl",
		"pottery Redlock acquired/extend/release",
		"See docs/compatibility.md",
	} {
		if !strings.Contains(r.Str, want) {
			t.Errorf("message %q lacks %q", r.Str, want)
		}
	}
	if got := len(Supported()); got != 6 {
		t.Errorf("Supported() has %d families: %v", got, Supported())
	}
}

func TestAppendReply(t *testing.T) {
	cases := []struct {
		r          Reply
		resp2, rs3 string
	}{
		{nilReply, "$-1\r\n", "_\r\n"},
		{intReply(-3), ":-3\r\n", ":-3\r\n"},
		{okReply, "+OK\r\n", "+OK\r\n"},
		{bulkReply("tok"), "$3\r\ntok\r\n", "$3\r\ntok\r\n"},
		{bulkReply(""), "$0\r\n\r\n", "$0\r\n\r\n"},
		{arrayReply(nilReply, intReply(-2)), "*2\r\n$-1\r\n:-2\r\n", "*2\r\n_\r\n:-2\r\n"},
		{arrayReply(), "*0\r\n", "*0\r\n"},
		{errorReply("ERR bad\r\nthing"), "-ERR bad  thing\r\n", "-ERR bad  thing\r\n"},
		{Reply{Kind: 99}, "-ERR internal: unknown reply kind\r\n", "-ERR internal: unknown reply kind\r\n"},
	}
	for _, c := range cases {
		if got := string(AppendReply([]byte("x"), c.r, false)); got != "x"+c.resp2 {
			t.Errorf("RESP2 %v = %q, want %q", c.r, got, c.resp2)
		}
		if got := string(AppendReply(nil, c.r, true)); got != c.rs3 {
			t.Errorf("RESP3 %v = %q, want %q", c.r, got, c.rs3)
		}
	}
}

func TestRedisHelpers(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "12": true, "-7": true, "-0": false, "01": false, "+1": false,
		" 1": false, "1.0": false, "": false, "9223372036854775807": true, "9223372036854775808": false} {
		if _, ok := parseRedisInt(s); ok != want {
			t.Errorf("parseRedisInt(%q) ok=%v", s, ok)
		}
	}
	for _, c := range []struct {
		s          string
		start, end int64
		want       string
	}{
		{"abcdef", 0, 2, "abc"}, {"abcdef", 0, -1, "abcdef"}, {"abcdef", 0, -10, "a"}, {"", 0, -1, ""},
		{"abc", 0, 99, "abc"}, {"abc", -2, -1, "bc"}, {"abc", -1, -2, ""}, {"abc", 2, 1, ""},
	} {
		if got := redisGetrange(c.s, c.start, c.end); got != c.want {
			t.Errorf("getrange(%q,%d,%d) = %q, want %q", c.s, c.start, c.end, got, c.want)
		}
	}
	for _, c := range []struct {
		s    string
		i, j int64
		want string
	}{
		{"abcdef", 1, 3, "abc"}, {"abcdef", 1, 0, ""}, {"abcdef", 1, -1, "abcdef"}, {"abcdef", 1, -3, "abcd"},
		{"abc", 1, 99, "abc"}, {"abc", -2, -1, "bc"}, {"abc", 0, 2, "ab"},
	} {
		if got := luaSub(c.s, c.i, c.j); got != c.want {
			t.Errorf("sub(%q,%d,%d) = %q, want %q", c.s, c.i, c.j, got, c.want)
		}
	}
	for s, want := range map[string]float64{"10": 10, " 10\t": 10, "1e3": 1000, "0x1F": 31, "-2.5": -2.5} {
		if got, ok := luaToNumber(s); !ok || got != want {
			t.Errorf("luaToNumber(%q) = %v %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "x", "1x", "0x", "1 2"} {
		if _, ok := luaToNumber(s); ok {
			t.Errorf("luaToNumber(%q) accepted", s)
		}
	}
}

func ExampleUnsupportedScriptError() {
	fmt.Println(strings.SplitN(UnsupportedScriptError("0000000000000000000000000000000000000000").Str, ".", 2)[0])
	// Output: ERR this is a lock proxy; unsupported script (sha 0000000000000000000000000000000000000000)
}

// ---------------------------------------------------------------------------
// Differential tests: real client libraries against a real redis-server,
// through a recording proxy. Every script the libraries send must be in the
// catalogue under its exact SHA1, and replaying the recorded command sequence
// through our executors over the fake lock table must give the replies Redis
// gave (byte for byte, except remaining TTLs, which can only be close).

// startRedis runs a private redis-server and returns its address.
func startRedis(t *testing.T) string { return testproc.Redis(t).Addr }

// exchange is one command and the reply Redis gave to it.
type exchange struct {
	conn  int
	resp3 bool // the connection had switched to RESP3 (HELLO 3) before this command
	cmd   []string
	raw   []byte
	reply Reply
}

// recorder is a TCP proxy that forwards one command at a time and logs it
// with its reply. Clients that pipeline still work: commands are forwarded
// in order and each reply is read before the next command is sent.
type recorder struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	log    []exchange
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
		cmd, err := readRESP(cr, &craw)
		if err != nil {
			return
		}
		if _, err := server.Write(craw.Bytes()); err != nil {
			return
		}
		rep, err := readRESP(sr, &sraw)
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
		r.log = append(r.log, exchange{conn: id, resp3: resp3, cmd: args, raw: sraw.Bytes(), reply: rep})
		r.mu.Unlock()
		if len(args) > 1 && strings.EqualFold(args[0], "HELLO") && args[1] == "3" && rep.Kind != ReplyError {
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

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.log...)
}

// readRESP reads one RESP2/RESP3 value, copying its bytes to raw. RESP3
// aggregates become arrays and scalars statuses; only the kinds a lock
// script can return need to be exact.
func readRESP(r *bufio.Reader, raw *bytes.Buffer) (Reply, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return Reply{}, err
	}
	raw.WriteString(line)
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return Reply{}, fmt.Errorf("bad RESP line %q", line)
	}
	body := line[1 : len(line)-2]
	num := func() (int64, error) { return strconv.ParseInt(body, 10, 64) }
	switch line[0] {
	case '+', ',', '(':
		return statusReply(body), nil
	case '-':
		return errorReply(body), nil
	case ':':
		n, err := num()
		return intReply(n), err
	case '#':
		if body == "t" {
			return intReply(1), nil
		}
		return intReply(0), nil
	case '_':
		return nilReply, nil
	case '$', '=', '!':
		n, err := num()
		if err != nil || n < 0 {
			return nilReply, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return Reply{}, err
		}
		raw.Write(buf)
		if line[0] == '!' {
			return errorReply(string(buf[:n])), nil
		}
		return bulkReply(string(buf[:n])), nil
	case '*', '~', '>', '%', '|':
		n, err := num()
		if err != nil || n < 0 {
			return nilReply, err
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		arr := make([]Reply, 0, n)
		for i := int64(0); i < n; i++ {
			e, err := readRESP(r, raw)
			if err != nil {
				return Reply{}, err
			}
			arr = append(arr, e)
		}
		if line[0] == '|' { // attributes precede the real value
			return readRESP(r, raw)
		}
		return arrayReply(arr...), nil
	}
	return Reply{}, fmt.Errorf("unknown RESP type %q", line[0])
}

// closeEnough compares replies, allowing remaining TTLs to differ: the replay
// runs on a frozen clock while Redis's clock kept going.
func closeEnough(got, want Reply, ttl bool) bool {
	if !ttl {
		return reflect.DeepEqual(got, want)
	}
	if got.Kind != want.Kind || len(got.Array) != len(want.Array) || got.Str != want.Str {
		return false
	}
	if got.Kind == ReplyInt {
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
func replay(t *testing.T, log []exchange) map[string]bool {
	t.Helper()
	f := newFake()
	seen := map[string]bool{}
	compared := 0
	defer func() { t.Logf("compared %d script replies; scripts seen: %d", compared, len(seen)) }()
	for _, ex := range log {
		cmd := ex.cmd
		if len(cmd) == 0 {
			continue
		}
		var s *Script
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
					ttl = ms(n)
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
			want := nilReply
			if got {
				want = okReply
			}
			if !reflect.DeepEqual(want, ex.reply) {
				t.Fatalf("replay diverged at %q: Redis %v, fake %v", cmd, ex.reply, want)
			}
			continue
		case "GET":
			tok, held := f.Get(cmd[1])
			want := nilReply
			if held {
				want = bulkReply(tok)
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
			if s, ok = LookupSHA(cmd[1]); !ok {
				t.Fatalf("EVALSHA of unknown script %s", cmd[1])
			}
			if ex.reply.Kind == ReplyError && strings.HasPrefix(ex.reply.Str, "NOSCRIPT") {
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
		if got.Kind == ReplyError || ex.reply.Kind == ReplyError {
			if got.Kind != ex.reply.Kind || strings.Fields(got.Str)[0] != strings.Fields(ex.reply.Str)[0] {
				t.Errorf("%s %q %q: Redis %v, native %v", s.ID, keys, argv, ex.reply, got)
			}
			continue
		}
		if !closeEnough(got, ex.reply, s.TTLReply) {
			t.Errorf("%s %q %q: Redis %v, native %v", s.ID, keys, argv, ex.reply, got)
			continue
		}
		if enc := AppendReply(nil, got, ex.resp3); !s.TTLReply && !bytes.Equal(enc, ex.raw) {
			t.Errorf("%s (resp3=%v): Redis sent %q, we would send %q", s.ID, ex.resp3, ex.raw, enc)
		}
	}
	return seen
}

// recognizeExact checks that a body a real client sent is catalogued under
// its exact SHA1, and that layout changes still find it through Normalize.
func recognizeExact(t *testing.T, body string) *Script {
	t.Helper()
	s, ok := Recognize(body)
	if !ok || s.SHA1 != SHA1Hex(body) {
		t.Fatalf("real client sent a script not catalogued under its exact SHA1 %s", SHA1Hex(body))
	}
	if got := SHA1Hex(Normalize(body)); got != s.NormSHA1 {
		t.Errorf("%s: NormSHA1 %s, but the real body normalises to %s", s.ID, s.NormSHA1, got)
	}
	mangled := "-- pasted into an application\r\n" +
		strings.NewReplacer("\n", "\r\n    ", "\t", "  ", " ", "   ").Replace(body) + "\n--[[ end ]]\n"
	if _, exact := LookupSHA(SHA1Hex(mangled)); exact {
		t.Fatalf("mangling did not change the body")
	}
	if m, ok := Recognize(mangled); !ok || m.Semantics != s.Semantics {
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
// client marked RealClient must have been sent by the real library.
func checkRealClientEntries(t *testing.T, seen map[string]bool, client string) {
	t.Helper()
	for _, s := range Catalogue() {
		if s.Verified != RealClient {
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
	bodies := map[string]string{}
	add := func(body string) { bodies[SHA1Hex(body)] = body }
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
		if _, ok := LookupSHA(sha); !ok {
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
