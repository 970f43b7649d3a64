package shiftlock

import "fmt"

// BreakEarlyReaderRelease turns on the deliberately broken variant: a reader
// that gives up while waiting for its epoch releases at once.
func BreakEarlyReaderRelease(c *Config) { c.testEarlyReaderRelease = true }

// SuccessorKnown picks up notifications already on the writer's slot and
// reports whether its successor has announced itself, so that a test can
// wait for the queue to form instead of sleeping.
func (g *Guard) SuccessorKnown() bool {
	g.c.drainSlot(g)
	return g.hasSucc
}

// DumpOwners describes every tracked slot (debugging aid for tests).
func (c *Client) DumpOwners() []string {
	var out []string
	for i := range c.owners.shards {
		s := &c.owners.shards[i]
		s.mu.Lock()
		for tg, o := range s.m {
			o.mu.Lock()
			out = append(out, fmt.Sprintf("node %d slot %#x entry %d tag %d vouched %v gone %v closed %v known %v pred %v subs %v parked %d",
				c.ep.Node(), uint32(tg), o.entry, o.tag, o.vouched, o.gone, o.closed, o.known, o.pred, o.subs, len(o.parked)))
			o.mu.Unlock()
		}
		s.mu.Unlock()
	}
	return out
}
