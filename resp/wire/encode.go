package wire

import (
	"strconv"
	"strings"
)

// The encoders below are the only place the proxy writes RESP. Each appends
// to dst and returns it, as strconv's Append functions do, so that a
// connection's replies (a whole pipelined batch on the event loop) go into
// one buffer without an allocation per reply. Those that differ between
// RESP2 and RESP3 take the connection's protocol.

// AppendStatus appends a status reply ("+OK"), kept on one line.
func AppendStatus(dst []byte, s string) []byte { return appendLine(dst, '+', s) }

// AppendError appends an error reply; s starts with its code ("ERR ...").
func AppendError(dst []byte, s string) []byte { return appendLine(dst, '-', s) }

func appendLine(dst []byte, prefix byte, s string) []byte {
	dst = append(dst, prefix)
	dst = append(dst, OneLine(s)...)
	return append(dst, "\r\n"...)
}

// AppendInt appends an integer reply.
func AppendInt(dst []byte, n int64) []byte { return appendHeader(dst, ':', n) }

// AppendBulk appends a bulk string; it takes a []byte too, so that an
// argument echoed back is not copied into a string first.
func AppendBulk[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = appendHeader(dst, '$', int64(len(s)))
	dst = append(dst, s...)
	return append(dst, "\r\n"...)
}

// AppendNull appends the null reply: "_" in RESP3, the null bulk in RESP2.
func AppendNull(dst []byte, resp3 bool) []byte {
	if resp3 {
		return append(dst, "_\r\n"...)
	}
	return append(dst, "$-1\r\n"...)
}

// AppendArray appends the header of an array of n elements, which the
// caller appends next.
func AppendArray(dst []byte, n int) []byte { return appendHeader(dst, '*', int64(n)) }

// AppendCommand appends a command as a client sends it: an array of bulk
// strings. The server never sends one; tests and tools that speak to it do.
func AppendCommand(dst []byte, args ...string) []byte {
	dst = AppendArray(dst, len(args))
	for _, a := range args {
		dst = AppendBulk(dst, a)
	}
	return dst
}

// AppendMap appends the header of a map of n pairs: a RESP3 map, or a flat
// array of 2n elements in RESP2, as Redis does for HELLO.
func AppendMap(dst []byte, n int, resp3 bool) []byte {
	if resp3 {
		return appendHeader(dst, '%', int64(n))
	}
	return AppendArray(dst, 2*n)
}

// AppendVerbatim appends a RESP3 verbatim string (INFO uses it), or a plain
// bulk in RESP2.
func AppendVerbatim(dst []byte, s string, resp3 bool) []byte {
	if !resp3 {
		return AppendBulk(dst, s)
	}
	dst = appendHeader(dst, '=', int64(len(s)+4))
	dst = append(dst, "txt:"...)
	dst = append(dst, s...)
	return append(dst, "\r\n"...)
}

// AppendReply appends r in RESP2, or in RESP3 when resp3 is set (the two
// differ only for nil here; a script's array stays an array in RESP3).
func AppendReply(dst []byte, r Reply, resp3 bool) []byte {
	switch r.Kind {
	case ReplyNil:
		return AppendNull(dst, resp3)
	case ReplyInt:
		return AppendInt(dst, r.Int)
	case ReplyStatus:
		return AppendStatus(dst, r.Str)
	case ReplyError:
		return AppendError(dst, r.Str)
	case ReplyBulk:
		return AppendBulk(dst, r.Str)
	case ReplyArray:
		dst = AppendArray(dst, len(r.Array))
		for _, e := range r.Array {
			dst = AppendReply(dst, e, resp3)
		}
		return dst
	}
	return AppendError(dst, "ERR internal: unknown reply kind")
}

// appendHeader appends a type byte, a number and CRLF: the line that
// starts an integer, a bulk or an aggregate.
func appendHeader(dst []byte, prefix byte, n int64) []byte {
	dst = append(dst, prefix)
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, "\r\n"...)
}

// OneLine keeps a status or error on one line, as Redis does, because a CR
// or LF inside would end the reply early and desynchronise the client.
func OneLine(s string) string {
	// IndexByte twice: every status reply comes here, and ContainsAny
	// costs more than the rest of writing "+OK".
	if strings.IndexByte(s, '\n') < 0 && strings.IndexByte(s, '\r') < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}
