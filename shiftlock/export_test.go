package shiftlock

// BreakEarlyReaderRelease turns on the deliberately broken variant: a reader
// that gives up while waiting for its epoch releases at once.
func BreakEarlyReaderRelease(c *Config) { c.testEarlyReaderRelease = true }
