package resp

import "strconv"

// replyWriter accumulates replies in the connection's protocol: one
// command's (redcon), or a whole batch of pipelined commands' (the event
// loop, which writes them with one system call). Handlers write to it
// rather than to the connection so that every reply path can be tested and
// fuzzed without a network.
type replyWriter struct {
	b     []byte
	resp3 bool
}

func (w *replyWriter) line(prefix byte, s string) {
	w.b = append(w.b, prefix)
	w.b = append(w.b, oneLine(s)...)
	w.b = append(w.b, "\r\n"...)
}

func (w *replyWriter) status(s string) { w.line('+', s) }
func (w *replyWriter) err(s string)    { w.line('-', s) }

func (w *replyWriter) int(n int64) {
	w.b = append(w.b, ':')
	w.b = strconv.AppendInt(w.b, n, 10)
	w.b = append(w.b, "\r\n"...)
}

func (w *replyWriter) bulk(s string) {
	w.b = append(w.b, '$')
	w.b = strconv.AppendInt(w.b, int64(len(s)), 10)
	w.b = append(w.b, "\r\n"...)
	w.b = append(w.b, s...)
	w.b = append(w.b, "\r\n"...)
}

// bulkBytes is bulk for an argument echoed back, without a string copy.
func (w *replyWriter) bulkBytes(b []byte) {
	w.b = append(w.b, '$')
	w.b = strconv.AppendInt(w.b, int64(len(b)), 10)
	w.b = append(w.b, "\r\n"...)
	w.b = append(w.b, b...)
	w.b = append(w.b, "\r\n"...)
}

func (w *replyWriter) null() {
	if w.resp3 {
		w.b = append(w.b, "_\r\n"...)
	} else {
		w.b = append(w.b, "$-1\r\n"...)
	}
}

func (w *replyWriter) array(n int) {
	w.b = append(w.b, '*')
	w.b = strconv.AppendInt(w.b, int64(n), 10)
	w.b = append(w.b, "\r\n"...)
}

// mapHeader starts a map of n pairs: a RESP3 map, or a flat array of 2n
// elements in RESP2, as Redis does for HELLO.
func (w *replyWriter) mapHeader(n int) {
	if w.resp3 {
		w.b = append(w.b, '%')
		w.b = strconv.AppendInt(w.b, int64(n), 10)
		w.b = append(w.b, "\r\n"...)
		return
	}
	w.array(2 * n)
}

// verbatim is a RESP3 verbatim string (INFO uses it) or a plain bulk.
func (w *replyWriter) verbatim(s string) {
	if !w.resp3 {
		w.bulk(s)
		return
	}
	w.b = append(w.b, '=')
	w.b = strconv.AppendInt(w.b, int64(len(s)+4), 10)
	w.b = append(w.b, "\r\ntxt:"...)
	w.b = append(w.b, s...)
	w.b = append(w.b, "\r\n"...)
}

func (w *replyWriter) reply(r Reply) { w.b = AppendReply(w.b, r, w.resp3) }

func (w *replyWriter) reset() { w.b = w.b[:0] }
