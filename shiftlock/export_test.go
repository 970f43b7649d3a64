package shiftlock

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

// MaxQueryHops is how many writers an owner question passes at most.
const MaxQueryHops = maxQueryHops
