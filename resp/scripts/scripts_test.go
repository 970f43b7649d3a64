package scripts_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
	"github.com/shiftlock/shiftlock-proxy/resp/scripts/scripttest"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

const sec = time.Second

// TestScenarios runs every entry's scenario on the in-memory table. The
// same scenarios run on redis-server with the clients' published bodies in
// itest (TestCatalogueSemantics), which fetches those bodies.
func TestScenarios(t *testing.T) {
	for _, s := range scripts.Catalogue() {
		t.Run(s.ID, func(t *testing.T) { scripttest.Run(t, s, nil, "") })
	}
}

func TestArgumentValidation(t *testing.T) {
	want := func(s *scripts.Script, keys, argv []string) {
		t.Helper()
		got := s.Exec(scripttest.New(), keys, argv)
		if got.Kind != wire.ReplyError || !strings.HasPrefix(got.Str, scripttest.ErrArgs.Str) {
			t.Errorf("%s %v %v = %v, want error %q...", s.ID, keys, argv, got, scripttest.ErrArgs.Str)
		}
	}
	for _, s := range scripts.Catalogue() {
		if s.MinKeys > 0 {
			want(s, nil, []string{"tok", "1000", "1000"})
		}
		if s.MinArgs > 0 {
			want(s, []string{"l"}, nil)
			want(s, []string{"l"}, make([]string, s.MinArgs-1))
		}
	}
}

func TestUnsupportedScriptError(t *testing.T) {
	r := scripts.UnsupportedScriptError("ABCDEF0123456789abcdef0123456789ABCDEF01")
	if r.Kind != wire.ReplyError {
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
	if got := len(scripts.Supported()); got != 6 {
		t.Errorf("scripts.Supported() has %d families: %v", got, scripts.Supported())
	}
}

func ExampleUnsupportedScriptError() {
	fmt.Println(strings.SplitN(scripts.UnsupportedScriptError("0000000000000000000000000000000000000000").Str, ".", 2)[0])
	// Output: ERR this is a lock proxy; unsupported script (sha 0000000000000000000000000000000000000000)
}

// TestExecNeverPanics feeds every entry awkward arguments over several lock
// states: the reply must be a well-formed value, never a panic.
func TestExecNeverPanics(t *testing.T) {
	pool := []string{"", "tok", "0", "-1", "1", "1000", "x", " 7 ", "1e3", "0x1F", "1.5", "-0",
		"99999999999999999999", "9223372036854775807", "-9223372036854775808", "inf", "nan", "yes", "no"}
	for _, s := range scripts.Catalogue() {
		for i := 0; i < 400; i++ {
			f := scripttest.New()
			if i%3 == 0 {
				f.Set("a", "tok", sec)
			}
			if i%5 == 0 {
				f.Set("b", "other", 0)
			}
			nk := i % 4
			keys := []string{"a", "b", "a"}[:min(nk, 3)]
			argv := []string{pool[i%len(pool)], pool[(i/3)%len(pool)], pool[(i/7)%len(pool)]}[:i%4]
			r := s.Exec(f, keys, argv)
			if r.Kind > wire.ReplyError {
				t.Fatalf("%s %v %v: bad reply kind %d", s.ID, keys, argv, r.Kind)
			}
			if r.Kind == wire.ReplyError && !regexp.MustCompile(`^[A-Z]+ `).MatchString(r.Str) {
				t.Fatalf("%s %v %v: error without code: %q", s.ID, keys, argv, r.Str)
			}
		}
	}
}

func TestLockTableErrorsBecomeReplies(t *testing.T) {
	for _, s := range scripts.Catalogue() {
		f := scripttest.New()
		f.Set("a", "tok", sec)
		f.FailWith(errors.New("lock table unavailable"))
		r := s.Exec(f, []string{"a", "b"}, []string{"tok", "1000", "1000"})
		if r.Kind == wire.ReplyError && r.Str != "ERR lock table unavailable" {
			t.Errorf("%s: error reply %q", s.ID, r.Str)
		}
	}
	f := scripttest.New()
	f.FailWith(errors.New("WRONGTYPE not a lock"))
	s, _ := scripts.LookupSHA("c3f8721cbb97f72bc19e972846bd7aaf91901658")
	if r := s.Exec(f, []string{"a"}, []string{"tok"}); r.Str != "WRONGTYPE not a lock" {
		t.Errorf("coded error not kept: %v", r)
	}
}
