package fisslock

import "fmt"

// BreakIncarnation turns the switch's incarnation check off, so that a FREE
// or GRANT overtaking a shared grant is accepted: the checker must notice.
func (c *Cluster) BreakIncarnation() { c.noInca = true }

// Idle reports what is still held or queued anywhere, after a run's
// packets have settled: nothing should be.
func (c *Cluster) Idle() error {
	for lid := range c.metas {
		if m := c.metas[lid]; m != (meta{}) {
			return fmt.Errorf("lock %d: switch state %+v", lid, m)
		}
	}
	for _, n := range c.nodes {
		n.mu.Lock()
		na, nl := len(n.agents), len(n.lm)
		n.mu.Unlock()
		if na != 0 || nl != 0 {
			return fmt.Errorf("machine %d: %d agents, %d fallback locks left", n.id, na, nl)
		}
	}
	return nil
}
