package scripts

import (
	"regexp"
	"strings"
	"testing"
)

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
