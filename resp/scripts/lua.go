package scripts

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// maxTTLms is the largest TTL in ms that fits a time.Duration.
const maxTTLms = math.MaxInt64 / int64(time.Millisecond)

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// parseRedisInt parses an integer argument the way Redis does (string2ll):
// only the canonical decimal form, so "+1", "01", "-0", " 1" and "1.0" fail.
func parseRedisInt(s string) (int64, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != s {
		return 0, false
	}
	return v, true
}

// pexpireArg parses a PEXPIRE milliseconds argument. Non-positive values are
// valid: PEXPIRE then deletes the key.
func pexpireArg(s string) (int64, wire.Reply, bool) {
	v, ok := parseRedisInt(s)
	if !ok {
		return 0, wire.Error(errNotInteger), false
	}
	if v > maxTTLms {
		return 0, wire.Error(errPexpireRange), false
	}
	return v, wire.Reply{}, true
}

// setPXArg parses the PX argument of SET, which must be positive.
func setPXArg(s string) (time.Duration, wire.Reply, bool) {
	v, ok := parseRedisInt(s)
	if !ok {
		return 0, wire.Error(errNotInteger), false
	}
	if v <= 0 || v > maxTTLms {
		return 0, wire.Error(errSetExpire), false
	}
	return ms(v), wire.Reply{}, true
}

// luaToNumber converts a string the way Lua 5.1 coerces it in arithmetic and
// tonumber: surrounding whitespace allowed, decimal, exponent or hex form.
func luaToNumber(s string) (float64, bool) {
	t := strings.Trim(s, " \t\n\r\v\f")
	if t == "" {
		return 0, false
	}
	if u := strings.TrimPrefix(strings.TrimPrefix(t, "0x"), "0X"); len(u) < len(t) {
		v, err := strconv.ParseUint(u, 16, 64)
		return float64(v), err == nil
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil && !strings.Contains(err.Error(), "range") {
		return 0, false
	}
	return v, true
}

// luaNumberArg converts a Lua number passed to redis.call into the integer
// Redis will parse from it. Redis formats numbers with %.17g, so only
// integral values that print without an exponent parse as integers.
func luaNumberArg(f float64) (int64, bool) {
	if f != math.Trunc(f) || math.Abs(f) >= 1e17 {
		return 0, false
	}
	return int64(f), true
}

// redisGetrange is GETRANGE's slice of s (Redis 7 semantics).
func redisGetrange(s string, start, end int64) string {
	n := int64(len(s))
	if start < 0 && end < 0 && start > end {
		return ""
	}
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	if start < 0 {
		start = 0
	}
	if end < 0 {
		end = 0
	}
	if end >= n {
		end = n - 1
	}
	if n == 0 || start > end {
		return ""
	}
	return s[start : end+1]
}

// luaSub is Lua 5.1's string.sub(s, i, j).
func luaSub(s string, i, j int64) string {
	n := int64(len(s))
	if i < 0 {
		i += n + 1
	}
	if j < 0 {
		j += n + 1
	}
	if i < 1 {
		i = 1
	}
	if j > n {
		j = n
	}
	if i > j {
		return ""
	}
	return s[i-1 : j]
}

// dedupe drops repeated keys, keeping order. Redis scripts that SET every key
// of KEYS happily set a repeated key twice; the lock table would instead see
// the second occurrence as already held.
func dedupe(keys []string) []string {
	if len(keys) < 2 {
		return keys
	}
	seen := make(map[string]struct{}, len(keys))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out
}
