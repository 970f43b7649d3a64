package shiftlock

import (
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// deliver is the node's receive handler. Owner queries are answered here, on
// the delivery path, because the writer they ask about may be holding the
// lock and not looking at its slot; a Successor is both queued for the
// writer's release and asked about, since it carries the successor's tag.
func (c *Client) deliver(rm rdma.Message) error {
	if rm.To == ServiceTarget {
		return c.service(rm)
	}
	if !c.cfg.OwnerTags {
		return c.inbox.Deliver(rm)
	}
	switch rm.Payload[0] {
	case msgOwnerQuery:
		m, err := decode(rm.Payload)
		if err != nil {
			return err
		}
		c.ownerQuery(rm.To, m.Entry, query{tag: m.Value, origin: Tail{Node: m.Node, Target: rdma.Target(m.U32)}, wantNo: m.Flags&flagWantNo != 0, hops: m.Hops})
		return nil
	case msgSuccessor:
		if err := c.inbox.Deliver(rm); err != nil {
			return err
		}
		if m, err := decode(rm.Payload); err == nil && m.Value != 0 {
			c.ownerQuery(rm.To, m.Entry, query{tag: m.Value, origin: Tail{Node: rm.From, Target: rdma.Target(m.U32)}})
		}
		return nil
	}
	return c.inbox.Deliver(rm)
}
