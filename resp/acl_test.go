package resp

import "testing"

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

// FuzzGlobMatch: any pattern and key, no panic; "*" matches everything and
// a pattern without special bytes matches only itself.
func FuzzGlobMatch(f *testing.F) {
	f.Add("locks:*", "locks:1")
	f.Add("[a-", "b")
	f.Add("\\", "x")
	f.Fuzz(func(t *testing.T, pattern, key string) {
		globMatch(pattern, []byte(key))
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
