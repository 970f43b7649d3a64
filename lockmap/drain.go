package lockmap

// Drain refuses every acquire from now on (ErrDraining), so that the holds
// already granted can only go: released, expired, deleted. Acquires already
// queued go on. A proxy shutting down drains, then waits for Count to reach
// 0 before it leaves its memory nodes.
func (m *Map) Drain() { m.draining.Store(true) }

// Count is the number of keys held through this proxy.
func (m *Map) Count() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}
