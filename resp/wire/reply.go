package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// ReplyKind is the RESP type of a reply value.
type ReplyKind uint8

// The reply kinds a Lua script can produce that the lock scripts use.
const (
	ReplyNil    ReplyKind = iota // Lua false or nil: "$-1" in RESP2, "_" in RESP3
	ReplyInt                     // Lua number (truncated to an integer)
	ReplyStatus                  // redis.status_reply or a passed-through status such as SET's OK
	ReplyBulk                    // Lua string
	ReplyArray                   // Lua table used as an array
	ReplyError                   // error; Str carries the code, e.g. "ERR ..."
)

// Reply is a whole reply as a value, the form a script's reply takes. It is
// a value, not bytes, so that executors can be tested without a connection
// and compared with what Redis sent; AppendReply encodes it.
type Reply struct {
	Kind  ReplyKind
	Int   int64
	Str   string
	Array []Reply
}

// Reply constructors, kept short because the script executors use them on
// every path.
func Int(n int64) Reply      { return Reply{Kind: ReplyInt, Int: n} }
func Status(s string) Reply  { return Reply{Kind: ReplyStatus, Str: s} }
func Bulk(s string) Reply    { return Reply{Kind: ReplyBulk, Str: s} }
func Array(a ...Reply) Reply { return Reply{Kind: ReplyArray, Array: a} }
func Error(msg string) Reply { return Reply{Kind: ReplyError, Str: msg} }

var (
	// Nil is Lua's false or nil.
	Nil = Reply{Kind: ReplyNil}
	// OK is the status SET answers.
	OK = Status("OK")
)

// String renders a reply for test failures and logs.
func (r Reply) String() string {
	switch r.Kind {
	case ReplyNil:
		return "(nil)"
	case ReplyInt:
		return "(integer) " + strconv.FormatInt(r.Int, 10)
	case ReplyStatus:
		return "+" + r.Str
	case ReplyBulk:
		return strconv.Quote(r.Str)
	case ReplyError:
		return "-" + r.Str
	case ReplyArray:
		parts := make([]string, len(r.Array))
		for i, e := range r.Array {
			parts[i] = e.String()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("(kind %d)", r.Kind)
}
