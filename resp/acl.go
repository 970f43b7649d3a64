package resp

import (
	"crypto/subtle"
	"strconv"
	"strings"
)

// User is a named client identity (Redis ACL users, in their simplest
// useful form): AUTH user password, and the key patterns the user may
// touch. Patterns are Redis globs: * any run, ? any one byte, [abc] and
// [a-z] classes, \ escapes.
type User struct {
	Name     string
	Password string
	Keys     []string
}

// mayAccess reports whether u may touch key; a nil user is the default
// user, who may touch every key.
func (u *User) mayAccess(key []byte) bool {
	if u == nil {
		return true
	}
	for _, p := range u.Keys {
		if globMatch(p, key) {
			return true
		}
	}
	return false
}

// authenticate finds who user/pass is: ok, and the user (nil for the
// default user, the requirepass one).
func (s *Server) authenticate(user, pass string) (*User, bool) {
	if user == "" || user == "default" {
		if s.cfg.Password == "" {
			return nil, false
		}
		return nil, subtle.ConstantTimeCompare([]byte(pass), []byte(s.cfg.Password)) == 1
	}
	for i := range s.cfg.Users {
		u := &s.cfg.Users[i]
		if u.Name == user {
			return u, subtle.ConstantTimeCompare([]byte(pass), []byte(u.Password)) == 1
		}
	}
	return nil, false
}

// needsAuth reports whether a new connection starts unauthenticated: with a
// requirepass, or with users and no requirepass (the default user is then
// off, as Redis's "user default off": clients must AUTH as a user).
func (s *Server) needsAuth() bool { return s.cfg.Password != "" || len(s.cfg.Users) > 0 }

// keysAllowed checks the keys of command c (its key positions, or a
// script's numkeys) against st's user; false means it answered NOPERM.
func (st *connState) keysAllowed(c *command, args [][]byte) bool {
	u := st.user
	if u == nil {
		return true
	}
	if c.name == "client" {
		if sub := strings.ToLower(string(args[1])); sub == "list" || sub == "kill" {
			st.w.err("NOPERM User " + u.Name + " has no permissions to run the 'client|" + sub + "' command")
			return false
		}
	}
	first, last, step := keySpan(c, args)
	for i := first; i <= last; i += step {
		if !u.mayAccess(args[i]) {
			st.w.err("NOPERM No permissions to access a key")
			return false
		}
	}
	return true
}

// keySpan is where command c's keys are in args: args[first], then every
// step-th up to args[last]; none when first > last. A script's keys are its
// numkeys (a malformed numkeys names none; the command itself answers it).
func keySpan(c *command, args [][]byte) (first, last, step int) {
	switch c.name {
	case "eval", "evalsha":
		n, err := strconv.Atoi(string(args[2]))
		if err != nil || n < 0 || 3+n > len(args) {
			return 1, 0, 1
		}
		return 3, 2 + n, 1
	}
	if c.first <= 0 {
		return 1, 0, 1
	}
	last = c.last
	if last < 0 {
		last = len(args) + last
	}
	return c.first, min(last, len(args)-1), max(c.step, 1)
}

// globMatch is Redis's stringmatchlen for the forms key patterns use: *
// any run, ? any one byte, [abc], [a-z] and [^...] classes, \ escapes (a
// trailing \ is itself), and an unterminated class that matches nothing.
//
// Every token but * matches exactly one byte, so a failed match need only
// go back to the last star passed, and let it swallow one byte more: an
// earlier star could only take bytes that the later one can take as well.
// That bounds the work by len(s)*len(pattern) steps. Trying every way of
// placing the stars, as stringmatchlen does, costs len(s)^stars:
// "app:*:*:*:lock" against "app:" and 4000 colons was 53 s of CPU on the
// event loop that serves every client (issue 32).
func globMatch(pattern string, s []byte) bool {
	ok, _ := globSteps(pattern, s)
	return ok
}

// globSteps is globMatch, and how many pattern bytes it read to match
// tokens: at most (len(s)+1)*len(pattern), which the tests check. (A star
// restarts at most len(s) times in all, since the byte it restarts from
// only moves forward, and each try reads the pattern forward from the
// star.)
func globSteps(pattern string, s []byte) (ok bool, steps int) {
	p, i := 0, 0
	// Where to go back to: the pattern after the last star, and the key
	// byte that star's run ends before.
	starP, starI := -1, 0
	for i < len(s) {
		if p < len(pattern) {
			if pattern[p] == '*' {
				for p < len(pattern) && pattern[p] == '*' {
					p++
				}
				if p == len(pattern) {
					return true, steps // a trailing star takes the rest
				}
				starP, starI = p, i
				continue
			}
			next, ok := globOne(pattern, p, s[i])
			steps += next - p
			if ok {
				p, i = next, i+1
				continue
			}
		}
		if starP < 0 {
			return false, steps
		}
		starI++
		p, i = starP, starI
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern), steps
}

// globOne matches the one-byte token at pattern[p] (not a star) against c:
// whether it matches, and where the next token starts.
func globOne(pattern string, p int, c byte) (next int, ok bool) {
	switch pattern[p] {
	case '?':
		return p + 1, true
	case '[':
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
				match = match || pattern[end] == c
			case end+2 < len(pattern) && pattern[end+1] == '-' && pattern[end+2] != ']':
				lo, hi := pattern[end], pattern[end+2]
				if lo > hi {
					lo, hi = hi, lo
				}
				match = match || (lo <= c && c <= hi)
				end += 2
			default:
				match = match || pattern[end] == c
			}
			end++
		}
		if end >= len(pattern) {
			return len(pattern), false // unterminated class: match nothing
		}
		return end + 1, match != not
	case '\\':
		if p+1 < len(pattern) {
			p++
		}
	}
	return p + 1, pattern[p] == c
}
