package wire

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxReadBulk is Redis's largest bulk (proto-max-bulk-len).
const maxReadBulk = 512 << 20

// ReadReply reads one RESP2 or RESP3 value, copying its bytes to raw when
// raw is not nil. RESP3 aggregates become arrays and its other scalars
// statuses: only the kinds a lock script can return are exact. The proxy
// never reads replies; tests and tools that compare its replies with
// redis-server's do, and read both sides alike with this.
func ReadReply(r *bufio.Reader, raw *bytes.Buffer) (Reply, error) {
	if raw == nil {
		raw = new(bytes.Buffer)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return Reply{}, err
	}
	raw.WriteString(line)
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return Reply{}, fmt.Errorf("bad RESP line %q", line)
	}
	body := line[1 : len(line)-2]
	num := func() (int64, error) { return strconv.ParseInt(body, 10, 64) }
	switch line[0] {
	case '+', ',', '(':
		return Status(body), nil
	case '-':
		return Error(body), nil
	case ':':
		n, err := num()
		return Int(n), err
	case '#':
		if body == "t" {
			return Int(1), nil
		}
		return Int(0), nil
	case '_':
		return Nil, nil
	case '$', '=', '!':
		n, err := num()
		if err != nil || n < 0 {
			return Nil, err
		}
		if n > maxReadBulk {
			return Reply{}, fmt.Errorf("bulk of %d bytes (limit %d)", n, maxReadBulk)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return Reply{}, err
		}
		raw.Write(buf)
		if line[0] == '!' {
			return Error(string(buf[:n])), nil
		}
		return Bulk(string(buf[:n])), nil
	case '*', '~', '>', '%', '|':
		n, err := num()
		if err != nil || n < 0 {
			return Nil, err
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		// The count is the peer's word: allocate as elements arrive.
		arr := make([]Reply, 0, min(n, 64))
		for i := int64(0); i < n; i++ {
			e, err := ReadReply(r, raw)
			if err != nil {
				return Reply{}, err
			}
			arr = append(arr, e)
		}
		if line[0] == '|' { // attributes precede the real value
			return ReadReply(r, raw)
		}
		return Array(arr...), nil
	}
	return Reply{}, fmt.Errorf("unknown RESP type %q", line[0])
}
