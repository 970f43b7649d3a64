package shiftlock

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// ownerQuery asks the writer at slot at, and those ahead of it, whether one
// carries q's tag; a same-tag writer answers when vouched. A question that
// reaches the head of the queue, or a slot already gone, without a match
// is answered no if it asked for that: a queued writer does not (it simply
// waits its turn), a try does.
//
// On arrival at a node, the question first asks the node's listed writer
// with its tag, if any (ownerTable). A vouched one answers at once. One not
// yet vouched may stand behind the asker, whose own question may in turn
// wait on the asker: so the question waits there and also walks on, and
// whichever answers first counts (a queued writer drops later answers).
func (c *Client) ownerQuery(at rdma.Target, entry uint64, q query) {
	if o := c.owners.lookup(entry, q.tag); o != nil && !(q.origin.Node == c.ep.Node() && q.origin.Target == o.self) {
		o.mu.Lock()
		if !o.closed && !o.gone {
			if o.vouched {
				token := o.token
				o.mu.Unlock()
				c.answerSame(entry, q, token)
				return
			}
			if !q.wantNo {
				lq := q
				lq.viaList = true
				o.subs = append(o.subs, lq)
			}
		}
		o.mu.Unlock()
	}
	for ; q.hops < maxQueryHops; q.hops++ {
		o := c.owners.get(at)
		if o == nil {
			c.answerNo(entry, q)
			return
		}
		o.mu.Lock()
		if o.closed || o.entry != entry {
			o.mu.Unlock()
			c.answerNo(entry, q)
			return
		}
		if !o.known {
			// A successor can be quicker than our own enqueue's reply: keep
			// the question until we know whether anyone is ahead of us.
			o.parked = append(o.parked, q)
			o.mu.Unlock()
			return
		}
		if !o.listed && !o.gone && o.tag != 0 {
			c.owners.list(o)
		}
		if o.tag == q.tag && !o.gone {
			vouched, token := o.vouched, o.token
			if !vouched {
				o.subs = append(o.subs, q)
			}
			o.mu.Unlock()
			if vouched {
				c.answerSame(entry, q, token)
			}
			return
		}
		pred := o.pred
		o.mu.Unlock()
		if pred.IsZero() {
			c.answerNo(entry, q)
			return
		}
		if pred.Node != c.ep.Node() {
			q.hops++
			c.send(context.Background(), pred, q.message(entry), func(error) { c.answerNo(entry, q) })
			return
		}
		at = pred.Target // ahead of us on this node: walk on in-process
	}
	c.answerNo(entry, q)
}

// answerSame tells q's asker that its owner holds entry, with token.
func (c *Client) answerSame(entry uint64, q query, token uint64) {
	c.send(context.Background(), q.origin, message{Kind: msgSameOwner, Entry: entry, Value: token}, nil)
}

func (c *Client) answerNo(entry uint64, q query) {
	if q.wantNo {
		c.send(context.Background(), q.origin, message{Kind: msgNotOwner, Entry: entry, Value: q.tag}, nil)
	}
}

// QueryOwner asks whether entry i, which a try found with queue tail tail,
// is held or waited for by a vouched writer with owner tag tag, and waits
// for the answer. It returns that writer's token if so. It costs no
// memory-node verb: the question goes to the tail's node and up the queue
// as messages. A queue without a same-tag writer answers no at once; one
// with a same-tag writer that is not vouched yet (granted a moment ago, or
// itself asking) answers once that writer is vouched, or lets go. The
// answer is what counts, not how fast it comes: under load the messages
// take as long as the proxies take to be scheduled. wait only bounds the
// silence of a proxy that died holding the question (OwnerAnswerCap); it
// runs out as a no.
func (c *Client) QueryOwner(ctx context.Context, i uint64, tail Tail, tag uint64, wait time.Duration) (uint64, bool) {
	if !c.cfg.OwnerTags || tag == 0 || tail.IsZero() {
		return 0, false
	}
	t, ch, err := c.inbox.Open()
	if err != nil {
		return 0, false
	}
	defer c.inbox.Close(t)
	q := query{tag: tag, origin: Tail{Node: c.ep.Node(), Target: t}, wantNo: true}
	if tail.Node == c.ep.Node() {
		c.ownerQuery(tail.Target, i, q)
	} else {
		c.send(ctx, tail, q.message(i), func(error) { c.answerNo(i, q) })
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case rm := <-ch:
			m, err := decode(rm.Payload)
			if err != nil || m.Entry != i {
				continue
			}
			switch m.Kind {
			case msgSameOwner:
				return m.Value, true
			case msgNotOwner:
				return 0, false
			}
		case <-timer.C:
			// Every question is answered unless a proxy died holding it:
			// worth a line, since the try answered no after the whole wait.
			c.log.Warn("owner question unanswered", zap.Uint64("entry", i), zap.Stringer("tail", tail), zap.Duration("waited", wait))
			return 0, false
		case <-ctx.Done():
			return 0, false
		}
	}
}
