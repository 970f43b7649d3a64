package shiftlock

import (
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// ServiceTarget is the Target of a node's service: messages between the
// nodes themselves rather than to one waiter slot. An Inbox never hands it
// out (a slot's Target carries a generation of 1 or more), so a Send to it
// can only mean the service. The proxy's quorum routing (lockmap) talks
// through it.
const ServiceTarget rdma.Target = 0

// BindService installs f as the handler of messages to ServiceTarget. Like
// every receive handler it runs on the fabric's delivery goroutine and must
// not block; an error from it fails the sender's Send. Until it is called,
// such messages are refused with rdma.ErrNotReady.
func (c *Client) BindService(f func(rdma.Message) error) { c.svc.Store(&f) }

func (c *Client) service(rm rdma.Message) error {
	f := c.svc.Load()
	if f == nil {
		return fmt.Errorf("%w: node %d serves no messages to its service target", rdma.ErrNotReady, c.ep.Node())
	}
	return (*f)(rm)
}
