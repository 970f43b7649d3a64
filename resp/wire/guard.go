// Package wire is the RESP wire format the proxy speaks: the reply type a
// script returns, the one encoder every reply goes through, and the framing
// guard that checks a client's bytes before anything parses them. It knows
// nothing of commands or locks, so that the scripts (resp/scripts) and the
// server (resp) share one encoding without importing each other.
package wire

import (
	"errors"
	"fmt"
)

// Guard validates the RESP framing of a client's byte stream before redcon
// parses it. redcon trusts the counts it reads: a multibulk count of 3e9 in
// a few bytes makes it loop over the count on every read, burning seconds
// of CPU per packet. The guard follows the framing incrementally, byte by
// byte, and rejects counts and lengths beyond the server's limits, and
// anything that is not RESP or an inline command, before the parser sees
// them. A multibulk count of zero or less is skipped, as Redis skips it.
type Guard struct {
	maxArgs int64
	maxBulk int64
	maxLine int
	state   gstate
	num     int64 // number being read
	neg     bool
	digits  int
	args    int64 // arguments left in the current multibulk
	skip    int64 // bulk bytes (plus CRLF) left to skip
	lineLen int   // length of the current inline command
	sawCR   bool
}

type gstate uint8

const (
	gStart    gstate = iota // at a command boundary
	gCount                  // reading "*<count>"
	gBulkHdr                // expecting '$'
	gBulkLen                // reading "$<len>"
	gBulkBody               // skipping the bulk and its CRLF
	gInline                 // an inline command, up to '\n'
)

// ErrFraming wraps every framing error the guard finds; the connection
// cannot be resynchronised after one and is closed.
var ErrFraming = errors.New("protocol error")

// MaxInline caps an inline command, as Redis's PROTO_INLINE_MAX_SIZE does,
// with its error. Multibulk commands may be larger (MaxCommandBytes).
const MaxInline = 64 << 10

// ErrInlineTooBig is Redis's error for an inline command over MaxInline.
const ErrInlineTooBig = ProtocolError("too big inline request")

// ProtocolError is a malformed request, worded as Redis words it
// ("Protocol error: ..."); the connection is closed after the reply.
type ProtocolError string

func (e ProtocolError) Error() string { return "Protocol error: " + string(e) }

// NewGuard is a guard that allows at most maxArgs arguments per multibulk
// command, bulks of at most maxBulk bytes and inline lines of at most
// maxLine bytes.
func NewGuard(maxArgs int64, maxBulk int64, maxLine int) *Guard {
	return &Guard{maxArgs: maxArgs, maxBulk: maxBulk, maxLine: maxLine}
}

// Feed checks p, continuing from where the previous call stopped.
func (g *Guard) Feed(p []byte) error {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch g.state {
		case gStart:
			switch c {
			case '*':
				if n, used, ok := lineNumber(p[i+1:]); ok {
					if n > g.maxArgs {
						return fmt.Errorf("%w: %d arguments (limit %d)", ErrFraming, n, g.maxArgs)
					}
					if n > 0 {
						g.args, g.state = n, gBulkHdr
					}
					i += used
					continue
				}
				g.state, g.num, g.neg, g.digits = gCount, 0, false, 0
			case '\r', '\n':
				// blank lines between commands are harmless
			default:
				g.state, g.lineLen = gInline, 1
			}
		case gInline:
			if c == '\n' {
				g.state = gStart
				continue
			}
			if g.lineLen++; g.lineLen > g.maxLine {
				return ErrInlineTooBig
			}
		case gCount, gBulkLen:
			if err := g.number(c); err != nil {
				return err
			}
			if !g.sawCR || c != '\n' {
				continue
			}
			g.sawCR = false
			n := g.num
			if g.neg {
				n = -n
			}
			if g.state == gCount {
				switch {
				case n > g.maxArgs:
					return fmt.Errorf("%w: %d arguments (limit %d)", ErrFraming, n, g.maxArgs)
				case n <= 0:
					g.state = gStart // "*0", "*-1": Redis skips them
				default:
					g.args, g.state = n, gBulkHdr
				}
				continue
			}
			if n < 0 || n > g.maxBulk {
				return fmt.Errorf("%w: bulk of %d bytes (limit %d)", ErrFraming, n, g.maxBulk)
			}
			g.skip, g.state = n+2, gBulkBody
		case gBulkHdr:
			if c != '$' {
				return fmt.Errorf("%w: expected '$', got %q", ErrFraming, c)
			}
			if n, used, ok := lineNumber(p[i+1:]); ok {
				if n > g.maxBulk {
					return fmt.Errorf("%w: bulk of %d bytes (limit %d)", ErrFraming, n, g.maxBulk)
				}
				g.skip, g.state = n+2, gBulkBody
				i += used
				continue
			}
			g.state, g.num, g.neg, g.digits = gBulkLen, 0, false, 0
		case gBulkBody:
			// Skip as much of the body as this read holds at once.
			take := int64(len(p) - i)
			if take > g.skip {
				take = g.skip
			}
			i += int(take) - 1
			if g.skip -= take; g.skip == 0 {
				if g.args--; g.args == 0 {
					g.state = gStart
				} else {
					g.state = gBulkHdr
				}
			}
		}
	}
	return nil
}

// lineNumber reads a whole count or length line at the front of p, the
// common case, in one pass: 1 to 18 digits and CRLF. It returns the number
// and the line's length, or ok=false for anything else (a line split
// across reads, a sign, an error), which the byte-at-a-time path handles.
func lineNumber(p []byte) (n int64, used int, ok bool) {
	i := 0
	for ; i < len(p) && i < 18 && '0' <= p[i] && p[i] <= '9'; i++ {
		n = n*10 + int64(p[i]-'0')
	}
	if i == 0 || i+1 >= len(p) || p[i] != '\r' || p[i+1] != '\n' {
		return 0, 0, false
	}
	return n, i + 2, true
}

// number accumulates the digits of a count or length line; sawCR marks the
// CR that must come before its LF.
func (g *Guard) number(c byte) error {
	switch {
	case g.sawCR:
		if c != '\n' {
			return fmt.Errorf("%w: expected LF after CR", ErrFraming)
		}
	case c == '\r':
		if g.digits == 0 {
			return fmt.Errorf("%w: empty number", ErrFraming)
		}
		g.sawCR = true
	case c == '-' && g.digits == 0 && !g.neg:
		g.neg = true
	case c >= '0' && c <= '9':
		if g.digits++; g.digits > 18 {
			return fmt.Errorf("%w: number too long", ErrFraming)
		}
		g.num = g.num*10 + int64(c-'0')
	default:
		return fmt.Errorf("%w: bad character %q in a number", ErrFraming, c)
	}
	return nil
}
