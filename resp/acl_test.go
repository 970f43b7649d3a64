package resp

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, key string
		want         bool
	}{
		{"*", "", true},
		{"*", "anything/with:colons", true},
		{"locks:orders:*", "locks:orders:42", true},
		{"locks:orders:*", "locks:orders:", true},
		{"locks:orders:*", "locks:payments:42", false},
		{"locks:orders:*", "xlocks:orders:1", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"k[0-9]", "k7", true},
		{"k[0-9]", "kx", false},
		{"k[^0-9]", "kx", true},
		{"k[abc]", "kb", true},
		{"k\\*", "k*", true},
		{"k\\*", "kx", false},
		{"*:*:1", "a:b:1", true},
		{"*:*:1", "a:b:2", false},
		{"k[", "k[", false},
	} {
		if got := globMatch(c.pattern, []byte(c.key)); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.key, got, c.want)
		}
	}
}

// TestGlobMatchLinear: the inputs that made the backtracking matcher spin
// (issue 32, item 8) cost at most (len(key)+1)*len(pattern) pattern bytes
// read, and still answer right.
func TestGlobMatchLinear(t *testing.T) {
	for _, c := range []struct {
		pattern, key string
		want         bool
	}{
		{"app:*:*:*:lock", "app:" + strings.Repeat(":", 4000), false},
		{"app:*:*:lock", "app:" + strings.Repeat(":", 64<<10), false},
		{"app:*:*:lock", "app:" + strings.Repeat(":", 64<<10) + "lock", true},
		{"*a*a*a*a*a*a*a*b", strings.Repeat("a", 10000), false},
		{"*[a-z]*?*\\**", strings.Repeat("ab", 5000), false},
		{"*[a-z]*?*\\**", strings.Repeat("ab", 5000) + "*", true},
	} {
		got, steps := globSteps(c.pattern, []byte(c.key))
		if got != c.want {
			t.Errorf("globMatch(%q, %d bytes) = %v, want %v", c.pattern, len(c.key), got, c.want)
		}
		if bound := (len(c.key) + 1) * len(c.pattern); steps > bound {
			t.Errorf("globMatch(%q, %d bytes) read %d pattern bytes, more than (len(key)+1)*len(pattern) = %d", c.pattern, len(c.key), steps, bound)
		}
	}
}

// globMatchBacktracking is the matcher before issue 32: Redis's
// stringmatchlen, trying every way of placing the stars. The differential
// fuzz below holds the linear one to its answers.
func globMatchBacktracking(pattern string, s []byte) bool {
	p := 0
	for p < len(pattern) {
		switch pattern[p] {
		case '*':
			for p+1 < len(pattern) && pattern[p+1] == '*' {
				p++
			}
			if p+1 == len(pattern) {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatchBacktracking(pattern[p+1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
			p++
		case '[':
			if len(s) == 0 {
				return false
			}
			end := p + 1
			not := end < len(pattern) && pattern[end] == '^'
			if not {
				end++
			}
			match := false
			for end < len(pattern) && pattern[end] != ']' {
				switch {
				case pattern[end] == '\\' && end+1 < len(pattern):
					end++
					match = match || pattern[end] == s[0]
				case end+2 < len(pattern) && pattern[end+1] == '-' && pattern[end+2] != ']':
					lo, hi := pattern[end], pattern[end+2]
					if lo > hi {
						lo, hi = hi, lo
					}
					match = match || (lo <= s[0] && s[0] <= hi)
					end += 2
				default:
					match = match || pattern[end] == s[0]
				}
				end++
			}
			if end >= len(pattern) {
				return false
			}
			if match == not {
				return false
			}
			s = s[1:]
			p = end + 1
		case '\\':
			if p+1 < len(pattern) {
				p++
			}
			fallthrough
		default:
			if len(s) == 0 || s[0] != pattern[p] {
				return false
			}
			s = s[1:]
			p++
		}
	}
	return len(s) == 0
}

// FuzzGlobMatch: any pattern and key, no panic, and the work stays within
// (len(key)+1)*len(pattern) pattern bytes; on inputs small enough for the
// backtracking matcher, both answer the same; "*" matches everything and a
// pattern without special bytes matches only itself.
func FuzzGlobMatch(f *testing.F) {
	f.Add("locks:*", "locks:1")
	f.Add("[a-", "b")
	f.Add("\\", "x")
	f.Add("a*[^]b]?\\*c*", "axbyc*zzc")
	f.Add("*[a-]*[\\]]*", "q-]")
	f.Add("app:*:*:*:lock", "app:::::::::lock")
	f.Fuzz(func(t *testing.T, pattern, key string) {
		got, steps := globSteps(pattern, []byte(key))
		if bound := (len(key) + 1) * len(pattern); steps > bound {
			t.Fatalf("globMatch(%q, %q) read %d pattern bytes, bound %d", pattern, key, steps, bound)
		}
		if len(pattern) <= 16 && len(key) <= 20 {
			if want := globMatchBacktracking(pattern, []byte(key)); got != want {
				t.Fatalf("globMatch(%q, %q) = %v, the backtracking matcher says %v", pattern, key, got, want)
			}
		}
		if !globMatch("*", []byte(key)) {
			t.Fatal("* did not match")
		}
		plain := true
		for i := 0; i < len(key); i++ {
			switch key[i] {
			case '*', '?', '[', '\\':
				plain = false
			}
		}
		if plain && !globMatch(key, []byte(key)) {
			t.Fatalf("literal %q did not match itself", key)
		}
	})
}
