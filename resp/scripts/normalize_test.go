package scripts

import (
	"strings"
	"testing"
)

// The scripts here are our own; third-party script text stays out of the
// repository (the real clients' bodies are exercised in scripts_test.go by
// recording what the libraries send).
const ownScript = `
local holder = redis.call("GET", KEYS[1])
if holder == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0
`

func TestNormalizeLayoutVariantsAgree(t *testing.T) {
	want := Normalize(ownScript)
	variants := map[string]string{
		"crlf":                strings.ReplaceAll(ownScript, "\n", "\r\n"),
		"spaces":              strings.ReplaceAll(ownScript, "\t", "        "),
		"indented":            strings.ReplaceAll(ownScript, "\n", "\n      "),
		"no trailing newline": strings.TrimRight(ownScript, "\n"),
		"line comments": "-- release if we hold it\n" +
			strings.Replace(ownScript, "end\n", "end -- done\n", 1),
		"block comments": "--[[ header\nspanning lines ]]" + ownScript + "--[==[ trailer ]] still ]==]",
		"padded punctuation": strings.NewReplacer(`("`, `( "`, `",`, `" ,`, `])`, `] )`, `==`, ` == `).
			Replace(ownScript),
		"tight punctuation": strings.NewReplacer(" == ", "==", ", ", ",").Replace(ownScript),
		"mixed whitespace":  strings.NewReplacer("\n", "\n\v\f  \t", " ", " \t ").Replace(ownScript),
	}
	for name, v := range variants {
		if got := Normalize(v); got != want {
			t.Errorf("%s: Normalize = %q, want %q", name, got, want)
		}
	}
	if want != `local holder=redis.call("GET",KEYS[1])if holder==ARGV[1]then return redis.call("DEL",KEYS[1])end return 0` {
		t.Errorf("canonical form changed: %q (catalogue NormSHA1s depend on it)", want)
	}
}

func TestNormalizeKeepsStringLiterals(t *testing.T) {
	cases := map[string]string{
		`return "a -- b"`:                  `return"a -- b"`,
		`return 'x --[[ y ]] z'`:           `return'x --[[ y ]] z'`,
		`return "  two  spaces  "`:         `return"  two  spaces  "`,
		`return "esc \" -- still string"`:  `return"esc \" -- still string"`,
		"return [[long -- \n  string]]":    "return[[long -- \n  string]]",
		"return [==[a ]] -- b]==] -- gone": "return[==[a ]] -- b]==]",
		"return [[crlf\r\ninside]]":        "return[[crlf\ninside]]",
		`return "unterminated -- x`:        `return"unterminated -- x`,
	}
	for in, want := range cases {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// Bodies that mean different things must not normalise to the same string.
func TestNormalizeKeepsTokensApart(t *testing.T) {
	distinct := [][2]string{
		{"return a - -b", "return a--b"},
		{"x = a .. b", "x = a . . b"},
		{"if a == b then end", "if a = = b then end"},
		{"return 1 .. 2", "return 1..2"},
		{"local t = x[ [[s]] ]", "local t = x[[[s]]]"},
		{"return a < = b", "return a <= b"},
		{"return KEYS[1]", "return KEYS [ 1 ]x"},
		{"return foo bar", "return foobar"},
		{"t[= =[x]=]", "t[==[x]==]"},
	}
	for _, p := range distinct {
		if a, b := Normalize(p[0]), Normalize(p[1]); a == b {
			t.Errorf("%q and %q both normalise to %q", p[0], p[1], a)
		}
	}
}

func TestNormalizeEdgeCases(t *testing.T) {
	cases := map[string]string{
		"":                  "",
		"   \r\n\t ":        "",
		"-- only a comment": "",
		"--[[ open comment": "",
		"--":                "",
		"-":                 "-",
		"[":                 "[",
		`"`:                 `"`,
		`'\`:                `'\`,
		"a\x00b":            "a\x00b",
		"a - - b":           "a- -b",
		"a---b\nc":          "a c",
		"é é":               "é é",
	}
	for in, want := range cases {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	seeds := []string{
		ownScript,
		strings.ReplaceAll(ownScript, "\n", "\r\n"),
		"return 'a -- b' -- c",
		"--[==[ x ]==] y [=[ z ]=]",
		"a - -b [ [ = [ ==[",
		"\"\\",
		"x[= =[y",
		"1 .. 2 . . 3 .5",
		"\r\n\r[[\r\n]]",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		if n2 := Normalize(n); n2 != n {
			t.Fatalf("not idempotent:\n in: %q\n 1st: %q\n 2nd: %q", s, n, n2)
		}
		if strings.HasPrefix(n, " ") || strings.HasSuffix(n, " ") && !strings.ContainsAny(n, `"'[`) {
			t.Fatalf("untrimmed output %q for %q", n, s)
		}
	})
}
