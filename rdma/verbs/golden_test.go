package verbs

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/internal/wire/wiretest"
)

// TestOpEncodingGolden: a CPU request of every memory verb, its reply and
// a request error, encoded and decoded back.
func TestOpEncodingGolden(t *testing.T) {
	var out strings.Builder
	ops := wiretest.Ops()
	for i := range ops {
		if ops[i].Wide && !ops[i].Verb.IsAtomic() {
			ops[i].Wide = false
		}
	}
	req := appendRequest(nil, 7, ops)
	fmt.Fprintf(&out, "request %s\n", hex.EncodeToString(req))
	var r Request
	var lens []int
	err := DecodeRequest(req, &r, &lens)
	fmt.Fprintf(&out, "decoded id=%d ops=%d lens=%v err=%v\n", r.ID, len(r.Ops), lens, err)
	rep := appendReplyHeader(nil, 7, len(ops))
	for i := range ops {
		rep = appendResult(rep, &ops[i])
	}
	fmt.Fprintf(&out, "reply %s\n", hex.EncodeToString(rep))
	back := make([]rdma.Op, len(ops))
	for i := range ops {
		back[i] = rdma.Op{Verb: ops[i].Verb, Wide: ops[i].Wide, Buf: make([]byte, len(ops[i].Buf))}
	}
	reqErr, err := decodeReply(rep, back)
	for i := range back {
		fmt.Fprintf(&out, "%d old=%v err=%v\n", i, back[i].Old, back[i].Err)
	}
	fmt.Fprintf(&out, "reply decoded reqErr=%v err=%v\n", reqErr, err)
	fmt.Fprintf(&out, "request error %s\n", hex.EncodeToString(appendRequestError(nil, 7, fmt.Errorf("%w: bad", rdma.ErrBadRequest))))
	wiretest.Golden(t, out.String())
}
