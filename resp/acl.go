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
	deny := func() bool {
		st.w.err("NOPERM No permissions to access a key")
		return false
	}
	switch c.name {
	case "eval", "evalsha":
		n, err := strconv.Atoi(string(args[2]))
		if err != nil || n < 0 || 3+n > len(args) {
			return true // the command itself answers the malformed numkeys
		}
		for _, k := range args[3 : 3+n] {
			if !u.mayAccess(k) {
				return deny()
			}
		}
		return true
	case "client":
		if sub := strings.ToLower(string(args[1])); sub == "list" || sub == "kill" {
			st.w.err("NOPERM User " + u.Name + " has no permissions to run the 'client|" + sub + "' command")
			return false
		}
	}
	if c.first <= 0 {
		return true
	}
	last := c.last
	if last < 0 {
		last = len(args) + last
	}
	step := max(c.step, 1)
	for i := c.first; i <= last && i < len(args); i += step {
		if !u.mayAccess(args[i]) {
			return deny()
		}
	}
	return true
}

// globMatch is Redis's stringmatchlen for the forms key patterns use.
func globMatch(pattern string, s []byte) bool {
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
				if globMatch(pattern[p+1:], s[i:]) {
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
				return false // unterminated class: match nothing
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
