package resp

import "github.com/shiftlock/shiftlock-proxy/resp/wire"

// replyWriter accumulates replies in the connection's protocol: one
// command's (redcon), or a whole batch of pipelined commands' (the event
// loop, which writes them with one system call). Handlers write to it
// rather than to the connection so that every reply path can be tested and
// fuzzed without a network. The bytes are wire's: this is the connection's
// buffer and protocol, not a second encoder.
type replyWriter struct {
	b     []byte
	resp3 bool
}

func (w *replyWriter) status(s string)    { w.b = wire.AppendStatus(w.b, s) }
func (w *replyWriter) err(s string)       { w.b = wire.AppendError(w.b, s) }
func (w *replyWriter) int(n int64)        { w.b = wire.AppendInt(w.b, n) }
func (w *replyWriter) bulk(s string)      { w.b = wire.AppendBulk(w.b, s) }
func (w *replyWriter) bulkBytes(b []byte) { w.b = wire.AppendBulk(w.b, b) }
func (w *replyWriter) null()              { w.b = wire.AppendNull(w.b, w.resp3) }
func (w *replyWriter) array(n int)        { w.b = wire.AppendArray(w.b, n) }
func (w *replyWriter) mapHeader(n int)    { w.b = wire.AppendMap(w.b, n, w.resp3) }
func (w *replyWriter) verbatim(s string)  { w.b = wire.AppendVerbatim(w.b, s, w.resp3) }
func (w *replyWriter) reply(r wire.Reply) { w.b = wire.AppendReply(w.b, r, w.resp3) }

func (w *replyWriter) reset() { w.b = w.b[:0] }

// bulkField and intField write one field of a map reply (mapHeader): its
// name, then its value.
func (w *replyWriter) bulkField(name, v string)      { w.bulk(name); w.bulk(v) }
func (w *replyWriter) intField(name string, n int64) { w.bulk(name); w.int(n) }
