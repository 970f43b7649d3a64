package resp

import (
	"bytes"

	"github.com/tidwall/redcon"

	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// cmdParser splits a connection's input into commands, for both front ends.
// Multibulk commands ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") are redcon's
// parser's, which slices the arguments out of the input. Inline commands
// ("GET k") are parsed here: redcon's inline parser allocated a copy of the
// rest of the line for every word, so a line of n words cost memory and
// time quadratic in n (150,000 words took 1.4 GB, issue 32). This one reads
// the line once, slices unquoted words out of the input and writes quoted
// ones, unescaped, to one arena sized for the line. Either way the
// arguments are valid until the input is discarded or the next command is
// parsed; what must outlive that is copied (loopConn.hold).
//
// The framing guard has seen every byte first: counts and lengths are within
// the server's limits, and an inline line within wire.MaxInline bytes.
type cmdParser struct {
	args  [][]byte
	arena []byte
}

const errUnbalancedQuotes = wire.ProtocolError("unbalanced quotes in request")

// next reads the command at the front of in: its arguments, and how many
// bytes it took, 0 if the command is not complete yet. A blank line, and a
// multibulk count of zero or less (which Redis skips), take their bytes and
// give no arguments.
func (p *cmdParser) next(in []byte) ([][]byte, int, error) {
	if len(in) == 0 {
		return nil, 0, nil
	}
	if in[0] != '*' {
		i := bytes.IndexByte(in, '\n')
		if i < 0 {
			return nil, 0, nil
		}
		line := in[:i]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		args, err := p.inline(line)
		return args, i + 1, err
	}
	if n := emptyMultibulk(in); n > 0 {
		return nil, n, nil
	}
	complete, args, _, left, err := redcon.ReadNextCommand(in, p.args[:0])
	if err != nil {
		return nil, 0, err
	}
	if !complete {
		return nil, 0, nil
	}
	p.args = args[:0]
	return args, len(in) - len(left), nil
}

// emptyMultibulk is the length of a whole "*0\r\n" or "*-<n>\r\n" line at
// the front of in, which Redis reads as nothing and goes on (redcon's
// parser refuses the negative ones); else 0.
func emptyMultibulk(in []byte) int {
	i := bytes.IndexByte(in, '\n')
	if i < 3 || (in[1] != '-' && string(in[1:i]) != "0\r") {
		return 0
	}
	return i + 1
}

// inline splits an inline command as redcon's server did: words separated
// by spaces; a word that starts with a double or single quote runs to the
// matching quote, which must end the word, with \n, \r and \t unescaped
// and any other escaped byte taken as is.
func (p *cmdParser) inline(line []byte) ([][]byte, error) {
	args := p.args[:0]
	if cap(p.arena) < len(line) {
		p.arena = make([]byte, 0, len(line))
	}
	// Unescaping never makes a quoted word longer, so the arena, sized for
	// the line, never moves and the slices into it stay valid.
	arena := p.arena[:0]
	for i := 0; i < len(line); {
		switch c := line[i]; c {
		case ' ':
			i++
		case '"', '\'':
			start := len(arena)
			i++
			closed := false
			for i < len(line) {
				b := line[i]
				i++
				if b == c {
					closed = true
					break
				}
				if b == '\\' {
					if i == len(line) {
						break
					}
					b = line[i]
					i++
					switch b {
					case 'n':
						b = '\n'
					case 'r':
						b = '\r'
					case 't':
						b = '\t'
					}
				}
				arena = append(arena, b)
			}
			if !closed || (i < len(line) && line[i] != ' ') {
				p.args = args[:0]
				return nil, errUnbalancedQuotes
			}
			args = append(args, arena[start:len(arena):len(arena)])
		default:
			j := i
			for j < len(line) && line[j] != ' ' {
				if line[j] == '"' || line[j] == '\'' {
					// A quote inside a word.
					p.args = args[:0]
					return nil, errUnbalancedQuotes
				}
				j++
			}
			args = append(args, line[i:j:j])
			i = j
		}
	}
	p.arena = arena[:0]
	p.args = args[:0]
	return args, nil
}

// trim lets go of buffers grown for one large command, so that a
// connection does not keep them for its lifetime (a multibulk of 65,536
// arguments needs 1.5 MB of slices).
func (p *cmdParser) trim() {
	if cap(p.args) > 1024 {
		p.args = nil
	}
	if cap(p.arena) > maxKept {
		p.arena = nil
	}
}
