package scripttest

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// checker runs a scenario step by step against the executor over the fake
// lock table and, when the client's published body is at hand, the same
// steps against a real redis-server running that body, so that every
// expected value is checked against Redis too.
type checker struct {
	t    *testing.T
	s    *scripts.Script
	f    *Table
	rc   Redis // nil: native only
	body string
}

// Redis is a connection to a redis-server on which a scenario runs too.
type Redis interface {
	// Do sends one command and returns its reply.
	Do(args ...string) (wire.Reply, error)
}

// HasScenario reports whether semantics has a scenario.
func HasScenario(semantics string) bool {
	_, ok := semanticsTests[semantics]
	return ok
}

// Run runs the scenario of s's Semantics, which covers held-by-token,
// held-by-other, missing, TTL and argument cases, step by step: on a fresh
// Table, and, when rc is not nil, on the redis-server behind rc running
// body (s's published text) with EVAL, so that every expected value is
// checked against Redis too (rc's keys are flushed first). It fails t when
// semantics has no scenario.
func Run(t *testing.T, s *scripts.Script, rc Redis, body string) {
	t.Helper()
	run, ok := semanticsTests[s.Semantics]
	if !ok {
		t.Fatalf("no scenario for semantics %q", s.Semantics)
	}
	c := &checker{t: t, s: s, f: New(), rc: rc, body: body}
	if rc != nil {
		c.redis("FLUSHALL")
	}
	run(c)
}

// ErrArgs is the start of the error an entry gives for too few KEYS or ARGV.
var ErrArgs = wire.Error("ERR wrong number of arguments")

func (c *checker) redis(args ...string) wire.Reply {
	c.t.Helper()
	r, err := c.rc.Do(args...)
	if err != nil {
		c.t.Fatalf("redis %q: %v", args, err)
	}
	return r
}

// set puts a lock in place on both sides; ttl 0 means no TTL.
func (c *checker) set(key, token string, ttl time.Duration) {
	c.f.Set(key, token, ttl)
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
	c.f.Advance(d)
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
	now, locks := c.f.Snapshot()
	for key, l := range locks {
		if l.Expires.IsZero() {
			c.redis("SET", key, l.Token)
		} else if rem := l.Expires.Sub(now).Milliseconds(); rem > 0 {
			c.redis("SET", key, l.Token, "PX", strconv.FormatInt(rem, 10))
		}
	}
}

// sameAsExpected compares a real Redis reply with a scenario's expectation:
// remaining TTLs may be off by the time the test took (up to 1.5 s, for a
// loaded host), and Redis decorates script errors with the script's location.
func sameAsExpected(got, want wire.Reply) bool {
	switch {
	case want.Kind == wire.ReplyError:
		if got.Kind != wire.ReplyError {
			return false
		}
		phrase := strings.TrimPrefix(strings.TrimPrefix(want.Str, "ERR "), "user_script: ")
		return strings.HasPrefix(got.Str, "ERR ") && strings.Contains(got.Str, phrase)
	case got.Kind != want.Kind || got.Str != want.Str || len(got.Array) != len(want.Array):
		return false
	case got.Kind == wire.ReplyInt && want.Int > 100:
		return got.Int <= want.Int && got.Int > want.Int-1500
	}
	for i := range got.Array {
		if !sameAsExpected(got.Array[i], want.Array[i]) {
			return false
		}
	}
	return got.Kind != wire.ReplyInt || got.Int == want.Int
}

func (c *checker) want(keys, argv []string, want wire.Reply) {
	c.t.Helper()
	got := c.s.Exec(c.f, keys, argv)
	if want.Kind == wire.ReplyError {
		if got.Kind != wire.ReplyError || !strings.HasPrefix(got.Str, want.Str) {
			c.t.Errorf("%s %v %v = %v, want error %q...", c.s.ID, keys, argv, got, want.Str)
		}
	} else if !reflect.DeepEqual(got, want) {
		c.t.Errorf("%s %v %v = %v, want %v", c.s.ID, keys, argv, got, want)
	}
	if c.rc == nil || want.Str == ErrArgs.Str {
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
		if (want == "" && r.Kind != wire.ReplyNil) || (want != "" && r.Str != want) {
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
		if r := c.redis("PTTL", key); !sameAsExpected(r, wire.Int(want)) {
			c.t.Errorf("%s: in Redis PTTL %s = %v, want about %d", c.s.ID, key, r, want)
		}
	}
}

func k(keys ...string) []string { return keys }
func a(argv ...string) []string { return argv }

const sec = time.Second

var (
	errNotInt = wire.Error("ERR value is not an integer")
	errExpire = wire.Error("ERR invalid expire time in 'set'")
	errArith  = wire.Error("ERR user_script: attempt to perform arithmetic")
)

// semanticsTests holds, for each Semantics, a scenario over a fresh fake
// lock table that covers held-by-token, held-by-other, missing, TTL and
// argument cases. Every catalogue entry runs the scenario of its Semantics.
var semanticsTests = map[string]func(c *checker){
	"release": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("other"), wire.Int(0))
		c.holder("l", "tok")
		c.want(k("l"), a("tok"), wire.Int(1))
		c.holder("l", "")
		c.want(k("l"), a("tok"), wire.Int(0))
		c.set("l", "tok", sec)
		c.advance(2 * sec)
		c.want(k("l"), a("tok"), wire.Int(0))
	},
	"release-tristate": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("other"), wire.Int(0))
		c.want(k("l"), a("tok"), wire.Int(1))
		c.want(k("l"), a("tok"), wire.Int(-1))
		c.want(k("l"), a(""), wire.Int(-1))
	},
	"extend": func(c *checker) {
		c.set("l", "tok", sec)
		c.want(k("l"), a("tok", "5000"), wire.Int(1))
		c.pttl("l", 5000)
		c.want(k("l"), a("other", "9000"), wire.Int(0))
		c.pttl("l", 5000)
		c.want(k("m"), a("tok", "9000"), wire.Int(0))
		c.want(k("l"), a("tok", "abc"), errNotInt)
		c.want(k("l"), a("other", "abc"), wire.Int(0)) // Redis never parses the TTL here
		c.want(k("l"), a("tok", "+5"), errNotInt)
		c.nativeOnly(func() { // Redis takes TTLs past time.Duration's range (292 years)
			c.want(k("l"), a("tok", "99999999999999999"), wire.Error("ERR invalid expire time in 'pexpire'"))
		})
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok", "700"), wire.Int(1))
		c.pttl("p", 700)
		c.want(k("l"), a("tok", "0"), wire.Int(1)) // PEXPIRE 0 deletes
		c.holder("l", "")
		c.want(k("p"), a("tok", "-5"), wire.Int(1))
		c.holder("p", "")
	},
	"extend-or-acquire": func(c *checker) {
		c.set("l", "tok", sec)
		c.want(k("l"), a("tok", "5000"), wire.Int(1))
		c.pttl("l", 5000)
		c.want(k("l"), a("other", "5000"), wire.Int(0))
		c.holder("l", "tok")
		c.want(k("m"), a("tok", "3000"), wire.Int(1))
		c.holder("m", "tok")
		c.pttl("m", 3000)
		c.want(k("l"), a("tok", "x"), errNotInt)
		c.want(k("l"), a("other", "x"), errNotInt)
		c.want(k("n"), a("tok", "0"), errExpire)
		c.holder("n", "")
		c.want(k("l"), a("tok", "0"), wire.Int(1))
		c.holder("l", "")
	},
	"pttl-or-minus3": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("tok"), wire.Int(10000))
		c.advance(1500 * time.Millisecond)
		c.want(k("l"), a("tok"), wire.Int(8500))
		c.want(k("l"), a("other"), wire.Int(-3))
		c.want(k("m"), a("tok"), wire.Int(-3))
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok"), wire.Int(-1))
	},
	"obtain-prefix": func(c *checker) {
		c.want(k("l"), a("tok1meta", "4", "10000"), wire.OK)
		c.holder("l", "tok1meta")
		c.pttl("l", 10000)
		c.advance(sec)
		c.want(k("l"), a("tok1meta", "4", "20000"), wire.OK) // same value: TTL reset
		c.pttl("l", 20000)
		c.want(k("l"), a("tok1other", "4", "5000"), wire.OK) // same token, new metadata
		c.holder("l", "tok1other")
		c.pttl("l", 5000)
		c.want(k("l"), a("tok2meta", "4", "5000"), wire.Nil)
		c.holder("l", "tok1other")
		c.want(k("l"), a("tok1other", "0", "5000"), wire.Nil) // empty prefix vs whole value
		c.want(k("l"), a("tok1", "x", "5000"), errArith)
		c.want(k("l"), a("tok1", "1.5", "5000"), errNotInt)
		c.want(k("l"), a("tok1other", "4", "x"), errNotInt)
		c.want(k("m"), a("tok1", "4", "0"), errExpire)
		c.holder("m", "")
		c.want(k("m"), a("tok1", "4", "-1"), errExpire)
		c.want(k("l"), a("tok1other", "99", "5000"), wire.OK) // offset past the end compares whole strings
		c.nativeOnly(func() {
			// A negative token length makes Redis compare the holder's
			// value without its last bytes: it would hand the lock to a
			// value that shares no token with it. Refused, hold untouched.
			c.want(k("l"), a("tok1othe", "-1", "5000"), wire.Error("ERR the token length"))
			c.holder("l", "tok1other")
			c.pttl("l", 5000)
			// A hold that cannot change hands in place (a shadow, a routed
			// share): the re-obtain fails and the hold stays as it was.
			c.f.Pin("l")
			c.want(k("l"), a("tok1new", "4", "9000"), wire.Nil)
			c.holder("l", "tok1other")
			c.pttl("l", 5000)
			c.f.Pin()
		})
	},
	"obtain-multi-prefix": func(c *checker) {
		c.want(k("a", "b"), a("tokAm", "4", "10000"), wire.OK)
		c.holder("a", "tokAm")
		c.holder("b", "tokAm")
		c.advance(sec)
		c.want(k("a", "b"), a("tokAm", "4", "10000"), wire.OK)
		c.pttl("b", 10000)
		c.want(k("a", "b"), a("tokAn", "4", "7000"), wire.OK)
		c.holder("a", "tokAn")
		c.pttl("a", 7000)
		c.want(k("a", "b"), a("tokBm", "4", "7000"), wire.Nil)
		c.set("c", "other", 10*sec)
		c.want(k("d", "c"), a("tokAm", "4", "7000"), wire.Nil)
		c.holder("d", "")
		c.want(k("a", "d"), a("tokAn", "4", "7000"), wire.Nil) // partly held, partly free: no
		c.holder("d", "")
		c.nativeOnly(func() { // Redis would MSETNX first and leave e and f set without TTL
			c.want(k("e", "f"), a("tokAm", "4", "x"), errNotInt)
			c.holder("e", "")
		})
		c.want(k("e", "f"), a("tokAm", "4", "0"), wire.OK) // set and deleted at once
		c.holder("e", "")
		c.want(k("a", "b"), a("tokAn", "x", "1000"), errArith)
		c.want(k("a", "b"), a("tokAx", "4", "x"), errNotInt)
		c.want(k("a", "b"), a("tokBx", "4", "x"), wire.Nil)
		c.want(k("a", "b"), a("tokAx", "4", "0"), wire.OK)
		c.holder("a", "")
		c.holder("b", "")
		c.want(k("g", "g"), a("tokG", "4", "1000"), wire.OK)
		c.holder("g", "tokG")
		c.set("h", "tokHm", 10*sec)
		c.set("i", "tokHm", 10*sec)
		c.nativeOnly(func() {
			c.want(k("h", "i"), a("tokH", "-1", "5000"), wire.Error("ERR the token length"))
			c.holder("h", "tokHm")
			c.pttl("h", 10000)
			// One key cannot change hands in place: neither does the other.
			c.f.Pin("i")
			c.want(k("h", "i"), a("tokHn", "4", "5000"), wire.Nil)
			c.holder("h", "tokHm")
			c.holder("i", "tokHm")
			c.pttl("h", 10000)
			c.f.Pin()
		})
	},
	"release-all": func(c *checker) {
		c.set("a", "tok", 10*sec)
		c.set("b", "tok", 10*sec)
		c.set("c", "other", 10*sec)
		c.want(k("a", "c"), a("tok"), wire.Nil)
		c.holder("a", "tok")
		c.want(k("a", "x"), a("tok"), wire.Nil)
		c.want(k("a", "b", "a"), a("tok"), wire.OK)
		c.holder("a", "")
		c.holder("b", "")
		c.want(k("a"), a("tok"), wire.Nil)
	},
	"refresh-all": func(c *checker) {
		c.set("a", "tok", sec)
		c.set("b", "tok", 0)
		c.set("c", "other", sec)
		c.want(k("a", "b"), a("tok", "5000"), wire.OK)
		c.pttl("a", 5000)
		c.pttl("b", 5000)
		c.want(k("a", "c"), a("tok", "9000"), wire.Nil)
		c.pttl("a", 5000)
		c.want(k("a", "c"), a("tok", "x"), wire.Nil)
		c.want(k("a", "b"), a("tok", "x"), errNotInt)
		c.want(k("a"), a("tok", "0"), wire.OK)
		c.holder("a", "")
	},
	"min-pttl-all": func(c *checker) {
		c.set("a", "tok", 5*sec)
		c.set("b", "tok", 3*sec)
		c.set("p", "tok", 0)
		c.set("q", "tok", 0)
		c.want(k("a", "b"), a("tok"), wire.Int(3000))
		c.want(k("a", "p"), a("tok"), wire.Int(5000))
		c.want(k("p", "q"), a("tok"), wire.Int(0))
		c.want(k("a", "x"), a("tok"), wire.Nil)
		c.want(k("a"), a("other"), wire.Nil)
	},
	"py-extend": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("tok", "5000", "0"), wire.Int(1))
		c.pttl("l", 15000)
		c.want(k("l"), a("tok", "5000", "1"), wire.Int(1))
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "4000"), wire.Int(1)) // no ARGV[3]: replace
		c.pttl("l", 4000)
		c.want(k("l"), a("tok", " 1e3 ", "0"), wire.Int(1)) // Lua coerces the string
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "x", "1"), errNotInt)
		c.want(k("l"), a("tok", "x", "0"), errArith)
		c.want(k("l"), a("tok", "0.5", "0"), errNotInt)
		c.want(k("l"), a("other", "5000", "1"), wire.Int(0))
		c.want(k("m"), a("tok", "5000", "1"), wire.Int(0))
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok", "5000", "1"), wire.Int(0)) // no TTL: cannot extend
		c.want(k("l"), a("tok", "-6000", "0"), wire.Int(1))
		c.holder("l", "")
	},
	"py-extend-add": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("tok", "5000"), wire.Int(1))
		c.pttl("l", 15000)
		c.want(k("l"), a("tok", "0x10"), wire.Int(1))
		c.pttl("l", 15016)
		c.want(k("l"), a("tok", "x"), errArith)
		c.want(k("l"), a("other", "5000"), wire.Int(0))
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok", "5000"), wire.Int(0))
		c.want(k("m"), a("tok", "5000"), wire.Int(0))
	},
	"py-acquire": func(c *checker) {
		c.want(k("l"), a("tok", "5000"), wire.Int(1))
		c.holder("l", "tok")
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "5000"), wire.Int(0))
		c.want(k("l"), a("other", ""), wire.Int(0))
		c.want(k("m"), a("tok", ""), wire.Int(1))
		c.pttl("m", -1)
		c.nativeOnly(func() { // Redis would SETNX first and leave n set without TTL
			c.want(k("n"), a("tok", "x"), errNotInt)
			c.holder("n", "")
		})
		c.want(k("l"), a("tok", "x"), wire.Int(0))
		c.want(k("n"), a("tok", "0"), wire.Int(1))
		c.holder("n", "")
	},
	"set-nx-px": func(c *checker) {
		c.want(k("l"), a("tok", "5000"), wire.OK)
		c.holder("l", "tok")
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "5000"), wire.Nil)
		c.want(k("l"), a("other", "5000"), wire.Nil)
		c.want(k("m"), a("tok", "x"), errNotInt)
		c.want(k("m"), a("tok", "0"), errExpire)
		c.want(k("l"), a("tok", "0"), errExpire)
		c.holder("m", "")
	},
	"acquire-all": func(c *checker) {
		c.want(k("a", "b"), a("tok", "5000"), wire.Int(2))
		c.holder("b", "tok")
		c.pttl("a", 5000)
		c.want(k("a", "b"), a("tok", "5000"), wire.Int(0)) // exists, even for the same token
		c.set("c", "other", 10*sec)
		c.want(k("d", "c"), a("tok", "5000"), wire.Int(0))
		c.holder("d", "")
		c.want(k("e", "e"), a("tok", "5000"), wire.Int(2))
		c.want(k(), a(), wire.Int(0))
		c.want(k("f"), a("tok"), ErrArgs)
		c.want(k("f"), a("tok", "x"), errNotInt)
		c.want(k("c"), a("tok", "x"), wire.Int(0))
		c.want(k("f"), a("tok", "0"), errExpire)
		c.holder("f", "")
	},
	"extend-all": func(c *checker) {
		c.set("a", "tok", sec)
		c.set("b", "tok", 0)
		c.set("c", "other", sec)
		c.want(k("a", "b"), a("tok", "5000"), wire.Int(2))
		c.pttl("b", 5000)
		c.want(k("a", "c"), a("tok", "9000"), wire.Int(0))
		c.want(k("a", "x"), a("tok", "9000"), wire.Int(0))
		c.pttl("a", 5000)
		c.want(k("a", "a", "b"), a("tok", "6000"), wire.Int(3))
		c.want(k("a"), a("tok", "x"), errNotInt)
		c.want(k("c"), a("tok", "x"), wire.Int(0))
		c.want(k("a"), a("tok", "0"), errExpire)
		c.want(k(), a(), wire.Int(0))
		c.want(k("a"), a("tok"), ErrArgs)
	},
	"release-each": func(c *checker) {
		c.set("a", "tok", sec)
		c.set("b", "tok", sec)
		c.set("c", "other", sec)
		c.want(k("a", "b", "c", "x"), a("tok"), wire.Int(2))
		c.holder("c", "other")
		c.holder("a", "")
		c.set("a", "tok", sec)
		c.want(k("a", "a"), a("tok"), wire.Int(1))
		c.want(k(), a(), wire.Int(0))
		c.want(k("a"), a(), ErrArgs)
	},
	"redlock-rb-lock": func(c *checker) {
		c.want(k("l"), a("tok", "5000", "yes"), wire.OK)
		c.holder("l", "tok")
		c.pttl("l", 5000)
		c.want(k("l"), a("tok", "8000", "yes"), wire.OK)
		c.pttl("l", 8000)
		c.want(k("l"), a("tok", "9000", "no"), wire.OK)
		c.pttl("l", 9000)
		c.want(k("l"), a("other", "5000", "yes"), wire.Nil)
		c.want(k("m"), a("tok", "5000", "no"), wire.Nil)
		c.want(k("m"), a("tok", "5000"), wire.Nil)
		c.holder("m", "")
		c.want(k("m"), a("tok", "x", "yes"), errNotInt)
		c.want(k("m"), a("tok", "x", "no"), wire.Nil)
		c.want(k("l"), a("tok", "x", "no"), errNotInt)
		c.want(k("l"), a("other", "0", "yes"), wire.Nil)
		c.want(k("m"), a("tok", "0", "yes"), errExpire)
	},
	"get-and-pttl": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), nil, wire.Array(wire.Bulk("tok"), wire.Int(10000)))
		c.want(k("m"), a("ignored"), wire.Array(wire.Nil, wire.Int(-2)))
		c.set("p", "other", 0)
		c.want(k("p"), nil, wire.Array(wire.Bulk("other"), wire.Int(-1)))
	},
	"pttl-or-zero": func(c *checker) {
		c.set("l", "tok", 10*sec)
		c.want(k("l"), a("tok"), wire.Int(10000))
		c.want(k("l"), a("other"), wire.Int(0))
		c.want(k("m"), a("tok"), wire.Int(0))
		c.set("p", "tok", 0)
		c.want(k("p"), a("tok"), wire.Int(0))
	},
}
