package scripts

import "strings"

// Normalize reduces a Lua script body to a canonical form so that bodies that
// differ only in layout compare equal: applications often paste a client's
// script into their own code with different indentation, CRLF line endings or
// extra comments, and then send it with EVAL. The canonical form is only ever
// hashed, never executed, but it keeps every token of the original in order so
// that two scripts that do different things do not collapse into one.
//
// Rules, applied outside string literals: comments (`--` to end of line and
// `--[[ ]]`/`--[==[ ]==]` long comments) count as whitespace; a run of
// whitespace becomes one space where removing it could join two tokens into a
// different one, and disappears everywhere else; leading and trailing
// whitespace is dropped. String literals (quoted and long-bracket) are kept
// byte for byte, except that newlines inside long strings are unified the way
// the Lua lexer does.
//
// The function works on bytes, never fails, and is idempotent:
// Normalize(Normalize(x)) == Normalize(x) for every x.
func Normalize(body string) string {
	var out strings.Builder
	out.Grow(len(body))
	pendingSpace := false // whitespace or a comment has been seen since the last token byte
	emit := func(chunk string) {
		if chunk == "" {
			return
		}
		if pendingSpace && out.Len() > 0 {
			s := out.String()
			if needSpace(s[len(s)-1], chunk[0]) {
				out.WriteByte(' ')
			}
		}
		pendingSpace = false
		out.WriteString(chunk)
	}

	i := 0
	n := len(body)
	for i < n {
		c := body[i]
		switch {
		case isLuaSpace(c):
			pendingSpace = true
			i++
		case c == '-' && i+1 < n && body[i+1] == '-':
			i += 2
			if level, ok := longBracketOpen(body, i); ok {
				_, i = scanLongBracket(body, i, level)
			} else {
				for i < n && body[i] != '\n' && body[i] != '\r' {
					i++
				}
			}
			pendingSpace = true
		case c == '"' || c == '\'':
			j := scanQuoted(body, i)
			emit(body[i:j])
			i = j
		case c == '[':
			if level, ok := longBracketOpen(body, i); ok {
				lit, j := scanLongBracket(body, i, level)
				emit(lit)
				i = j
			} else {
				emit("[")
				i++
			}
		default:
			j := i + 1
			for j < n && !isLuaSpace(body[j]) && body[j] != '"' && body[j] != '\'' &&
				body[j] != '[' && (body[j] != '-' || j+1 >= n || body[j+1] != '-') {
				j++
			}
			emit(body[i:j])
			i = j
		}
	}
	return out.String()
}

// isLuaSpace matches the bytes the Lua 5.1 lexer skips (isspace in the C locale).
func isLuaSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// isWordByte reports whether c can be part of a name or number. Bytes >= 0x80
// count as word bytes so that non-ASCII text never loses a separating space.
func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// needSpace reports whether a separator must stay between a token ending in a
// and one starting with b. Besides name/number boundaries it keeps the space
// wherever gluing would form a different lexeme: a comment start (--), a long
// bracket ([[, [=, =[), a longer operator (==, <=, >=, ~=, .., //, ::, <<, >>)
// or a number with a fraction (1 .5).
func needSpace(a, b byte) bool {
	if isWordByte(a) && isWordByte(b) {
		return true
	}
	switch a {
	case '-':
		return b == '-'
	case '[':
		return b == '[' || b == '='
	case '=':
		return b == '=' || b == '['
	case '<':
		return b == '=' || b == '<'
	case '>':
		return b == '=' || b == '>'
	case '~':
		return b == '='
	case '/':
		return b == '/'
	case ':':
		return b == ':'
	case '.':
		return b == '.' || b >= '0' && b <= '9'
	}
	return a >= '0' && a <= '9' && b == '.'
}

// longBracketOpen reports whether body[i:] starts a long bracket ([[, [=[,
// [==[, ...) and returns its level (the number of '=').
func longBracketOpen(body string, i int) (int, bool) {
	if i >= len(body) || body[i] != '[' {
		return 0, false
	}
	j := i + 1
	for j < len(body) && body[j] == '=' {
		j++
	}
	if j < len(body) && body[j] == '[' {
		return j - i - 1, true
	}
	return 0, false
}

// scanLongBracket returns the long-bracket literal starting at body[i] (with
// the given level) and the index after it. An unterminated literal runs to
// the end of the input, so the result is the same on every pass. Newline
// sequences inside are unified to "\n" as the Lua lexer does; "\n" is a fixed
// point, which keeps Normalize idempotent.
func scanLongBracket(body string, i, level int) (string, int) {
	closer := "]" + strings.Repeat("=", level) + "]"
	start := i
	i += level + 2
	end := strings.Index(body[i:], closer)
	if end < 0 {
		end = len(body)
	} else {
		end = i + end + len(closer)
	}
	lit := body[start:end]
	if strings.IndexByte(lit, '\r') >= 0 {
		lit = unifyNewlines(lit)
	}
	return lit, end
}

// unifyNewlines maps "\r\n", "\n\r" and a lone "\r" to "\n" (Lua's inclinenumber).
func unifyNewlines(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			if i+1 < len(s) && (s[i+1] == '\r' || s[i+1] == '\n') && s[i+1] != c {
				i++
			}
			b.WriteByte('\n')
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// scanQuoted returns the index after the quoted string starting at body[i].
// A backslash escapes the next byte. An unterminated string runs to the end of
// the input rather than to the end of the line, so that a second pass sees the
// same token.
func scanQuoted(body string, i int) int {
	q := body[i]
	j := i + 1
	for j < len(body) {
		switch body[j] {
		case '\\':
			j += 2
			continue
		case q:
			return j + 1
		}
		j++
	}
	return len(body)
}
