package baseline

// BreakSkipCompare turns on the deliberately broken CAS variant: acquire
// stores its id without comparing, so holders overlap. The checker must
// catch it.
func BreakSkipCompare(c *CASConfig) { c.skipCompare = true }

// DSLRIdle reports whether a DSLR word has served every ticket it issued.
func DSLRIdle(w uint64) bool {
	d := decodeDSLR(w)
	return d.nX == d.maxX && d.nS == d.maxS
}
