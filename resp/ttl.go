package resp

import (
	"math"
	"time"
)

// ttlFault is what is wrong with a TTL option's value. parseTTL reports it
// and each command words it: SET as redis-server does, the LOCK commands
// as they always have.
type ttlFault uint8

const (
	ttlOK         ttlFault = iota
	ttlNotInteger          // not an integer as Redis reads one (parseInteger)
	ttlNegative
	ttlZero
	ttlOutOfRange // above the command's limit on the number itself
	ttlTooLong    // the duration does not fit a time.Duration
)

// parseTTL is the one parser of the commands' TTL options: the value of
// unit (EX seconds, PX milliseconds, EXAT or PXAT a Unix time, upper case),
// at most limit as a number. An absolute time already past is 1 ms, as
// Redis sets such a key and expires it at once; now is asked for only by
// the absolute forms. Which options a command takes, in what order, and how
// it words a fault are the command's own (parseSet, parseLockOpts,
// cmdLockExtend).
func parseTTL(unit string, value []byte, limit int64, now func() time.Time) (time.Duration, ttlFault) {
	n, ok := parseInteger(value)
	switch {
	case !ok:
		return 0, ttlNotInteger
	case n < 0:
		return 0, ttlNegative
	case n == 0:
		return 0, ttlZero
	case n > limit:
		return 0, ttlOutOfRange
	}
	var d time.Duration
	switch unit {
	case "EX":
		if n > math.MaxInt64/int64(time.Second) {
			return 0, ttlTooLong
		}
		d = time.Duration(n) * time.Second
	case "PX":
		if n > math.MaxInt64/int64(time.Millisecond) {
			return 0, ttlTooLong
		}
		d = time.Duration(n) * time.Millisecond
	case "EXAT":
		d = time.Unix(n, 0).Sub(now())
	case "PXAT":
		d = time.UnixMilli(n).Sub(now())
	}
	if d <= 0 {
		d = time.Millisecond
	}
	return d, ttlOK
}

// maxLockTTLArg caps the number a LOCK command's PX or EX takes (about 35
// years in ms), as their argument parser always has.
const maxLockTTLArg = 1 << 40
