package scripts

import (
	"fmt"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// The Redis error texts the scripts can surface. Redis appends the script
// location to errors raised inside Lua; clients only look at the code.
const (
	errNotInteger   = "ERR value is not an integer or out of range"
	errSetExpire    = "ERR invalid expire time in 'set' command"
	errPexpireRange = "ERR invalid expire time in 'pexpire' command"
	errArithmetic   = "ERR user_script: attempt to perform arithmetic on a non-number value"
)

func opsError(err error) wire.Reply {
	msg := err.Error()
	// Keep an error code the lock table chose (e.g. "WRONGTYPE ..."); add the
	// generic one otherwise, as every RESP error needs one.
	if code, _, ok := strings.Cut(msg, " "); ok && code != "" && strings.Trim(code, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == "" {
		return wire.Error(msg)
	}
	return wire.Error("ERR " + msg)
}

// intReply is a script's 1 or 0 for whether an operation on the lock
// table was done, or the error it met.
func intReply(done bool, err error) wire.Reply {
	if err != nil {
		return opsError(err)
	}
	if done {
		return wire.Int(1)
	}
	return wire.Int(0)
}

// okReply is a script's OK or nil for whether an operation on the lock
// table was done, or the error it met.
func okReply(done bool, err error) wire.Reply {
	if err != nil {
		return opsError(err)
	}
	if done {
		return wire.OK
	}
	return wire.Nil
}

func heldBy(ops Ops, key, token string) bool {
	cur, held := ops.Get(key)
	return held && cur == token
}

// anyHeld reports whether any key of keys is held, by whoever.
func anyHeld(ops Ops, keys []string) bool {
	for _, k := range keys {
		if _, held := ops.Get(k); held {
			return true
		}
	}
	return false
}

// pexpire applies PEXPIRE to a key held by token. Redis deletes the key when
// the TTL is not positive and still answers 1, so that is done here too.
func pexpire(ops Ops, key, token string, n int64) (bool, error) {
	if n <= 0 {
		return ops.Release(key, token)
	}
	return ops.Extend(key, token, ms(n))
}

// reobtain is SET key value PX ttl on a key whose current state (cur, held)
// the caller has just read, and whose token the caller has shown to be its
// own (bsm/redislock's prefix check). The hold changes hands in place: the
// lock is never let go, so no one else can take it in between, and a
// re-obtain that cannot be done leaves the hold exactly as it was.
func reobtain(ops Ops, key, cur string, held bool, value string, ttl time.Duration) (bool, error) {
	if held {
		if cur == value {
			if ok, err := ops.Extend(key, value, ttl); ok || err != nil {
				return ok, err
			}
		} else if ok, err := ops.Reassign([]string{key}, []string{cur}, value, ttl); ok || err != nil {
			return ok, err
		}
		// Not held by cur any more, or not here in a way that can change
		// hands (docs/compatibility.md). Take it only if it is now free.
		if _, held = ops.Get(key); held {
			return false, nil
		}
	}
	return ops.Acquire([]string{key}, value, ttl, false)
}

// ---------------------------------------------------------------------------
// Executors. Each comment says what the clients' scripts do, in our words, and
// the executor mirrors it step for step, including which argument errors
// Redis would report on which path.

// execRelease: delete KEYS[1] if its value is ARGV[1]; reply 1 if deleted,
// else 0 (missing or held by someone else).
func execRelease(ops Ops, keys, argv []string) wire.Reply {
	return intReply(ops.Release(keys[0], argv[0]))
}

// execReleaseTristate: as execRelease, but a missing key replies -1 so that
// the client can report that the lock had already expired.
func execReleaseTristate(ops Ops, keys, argv []string) wire.Reply {
	ok, err := ops.Release(keys[0], argv[0])
	if err != nil {
		return opsError(err)
	}
	if ok {
		return wire.Int(1)
	}
	if _, held := ops.Get(keys[0]); !held {
		return wire.Int(-1)
	}
	return wire.Int(0)
}

// execExtend: if KEYS[1] holds ARGV[1], PEXPIRE it to ARGV[2] ms and reply 1;
// otherwise reply 0 without looking at ARGV[2].
func execExtend(ops Ops, keys, argv []string) wire.Reply {
	n, bad, ok := pexpireArg(argv[1])
	if !ok {
		if heldBy(ops, keys[0], argv[0]) {
			return bad
		}
		return wire.Int(0)
	}
	return intReply(pexpire(ops, keys[0], argv[0], n))
}

// execExtendOrAcquire: if KEYS[1] holds ARGV[1], PEXPIRE it to ARGV[2] ms;
// otherwise try SET KEYS[1] ARGV[1] PX ARGV[2] NX. wire.Reply 1 if either worked,
// else 0. An unparsable TTL is an error on both paths.
func execExtendOrAcquire(ops Ops, keys, argv []string) wire.Reply {
	key, token := keys[0], argv[0]
	n, bad, ok := pexpireArg(argv[1])
	if ok {
		done, err := pexpire(ops, key, token, n)
		if err != nil {
			return opsError(err)
		}
		if done {
			return wire.Int(1)
		}
	} else if heldBy(ops, key, token) {
		return bad
	}
	ttl, bad, ok := setPXArg(argv[1])
	if !ok {
		return bad
	}
	return intReply(ops.Acquire([]string{key}, token, ttl, false))
}

// execPTTLOrMinus3: if KEYS[1] holds ARGV[1], reply its PTTL (ms, or -1
// without TTL); otherwise reply -3, a value PTTL itself never returns.
func execPTTLOrMinus3(ops Ops, keys, argv []string) wire.Reply {
	if !heldBy(ops, keys[0], argv[0]) {
		return wire.Int(-3)
	}
	p, err := ops.PTTL(keys[0])
	if err != nil {
		return opsError(err)
	}
	return wire.Int(p)
}

// luaOffset is tonumber(ARGV[2]) used as a GETRANGE bound: a non-number fails
// in Lua arithmetic, a fraction fails GETRANGE's integer parsing.
func luaOffset(s string) (int64, wire.Reply, bool) {
	f, ok := luaToNumber(s)
	if !ok {
		return 0, wire.Error(errArithmetic), false
	}
	n, ok := luaNumberArg(f - 1)
	if !ok {
		return 0, wire.Error(errNotInteger), false
	}
	return n + 1, wire.Reply{}, true
}

// prefixMatches is the token check of redislock's obtain: the first offset
// bytes of the current value (GETRANGE 0 offset-1; "" if missing) equal the
// first offset bytes of ARGV[1] (string.sub 1 offset). ARGV[1] is the token
// followed by optional metadata, and offset is the token's length.
func prefixMatches(cur, value string, offset int64) bool {
	return redisGetrange(cur, 0, offset-1) == luaSub(value, 1, offset)
}

// errNoToken refuses a re-obtain whose token length shows no token: Redis
// would run it, and it would overwrite a lock whose holder shares nothing,
// or only the first byte, with the caller's value.
const errNoToken = "ERR the token length (ARGV[2]) must be at least 1 to re-obtain a held lock: with %d, the script would take over a lock held under another token, which this proxy refuses"

// ownsByPrefix is redislock's token check for a key held by cur, with the
// proxy's one refusal: a non-positive offset makes Redis compare no token
// at all (GETRANGE counts a negative end from the end of the value), so the
// caller has not shown the lock to be its own.
func ownsByPrefix(cur string, held bool, value string, offset int64) (bool, wire.Reply) {
	if !prefixMatches(cur, value, offset) {
		return false, wire.Nil
	}
	if offset < 1 && held && cur != value {
		return false, wire.Error(fmt.Sprintf(errNoToken, offset))
	}
	return true, wire.Reply{}
}

// execObtainPrefix: SET KEYS[1] ARGV[1] NX PX ARGV[3]; reply OK if it was
// set. Otherwise, if the current value starts with the same ARGV[2]-byte
// token, overwrite it with ARGV[1] and PX ARGV[3] (re-obtain with new
// metadata) and reply OK; else reply nil.
func execObtainPrefix(ops Ops, keys, argv []string) wire.Reply {
	key, value := keys[0], argv[0]
	ttl, bad, ok := setPXArg(argv[2])
	if !ok {
		return bad // SET validates PX before it looks at the key
	}
	got, err := ops.Acquire([]string{key}, value, ttl, false)
	if err != nil {
		return opsError(err)
	}
	if got {
		return wire.OK
	}
	offset, bad, ok := luaOffset(argv[1])
	if !ok {
		return bad
	}
	cur, held := ops.Get(key)
	if mine, r := ownsByPrefix(cur, held, value, offset); !mine {
		return r
	}
	return okReply(reobtain(ops, key, cur, held, value, ttl))
}

// execObtainMulti: MSETNX every key of KEYS to ARGV[1]; if that fails because
// some key exists, go on only if every key's value starts with the same
// ARGV[2]-byte token (a missing key does not, unless the token is empty), and
// then MSET them all. Either way, PEXPIRE every key to ARGV[3] and reply OK;
// reply nil if the token check failed.
//
// Unlike Redis, an unparsable ARGV[3] is reported before any key is set:
// Redis would have left the keys set without TTL.
func execObtainMulti(ops Ops, keys, argv []string) wire.Reply {
	value := argv[0]
	n, bad, ok := pexpireArg(argv[2])
	ukeys := dedupe(keys)
	if ok && n > 0 {
		got, err := ops.Acquire(ukeys, value, ms(n), false)
		if err != nil {
			return opsError(err)
		}
		if got {
			return wire.OK
		}
	} else if !anyHeld(ops, ukeys) {
		if !ok {
			return bad
		}
		return wire.OK // set, then deleted at once by a non-positive PEXPIRE
	}
	offset, badOffset, okOffset := luaOffset(argv[1])
	if !okOffset {
		return badOffset
	}
	type state struct {
		cur  string
		held bool
	}
	states := make([]state, len(ukeys))
	for i, k := range ukeys {
		cur, held := ops.Get(k)
		if mine, r := ownsByPrefix(cur, held, value, offset); !mine {
			return r
		}
		states[i] = state{cur, held}
	}
	if !ok {
		return bad
	}
	if n <= 0 {
		// MSET, then a PEXPIRE that deletes: every key goes, and the
		// token check showed each to be the caller's.
		for i, k := range ukeys {
			if states[i].held {
				if _, err := ops.Release(k, states[i].cur); err != nil {
					return opsError(err)
				}
			}
		}
		return wire.OK
	}
	// MSET: the held keys change hands in place, all at once; a key that
	// went free since the MSETNX is taken first, so that a failure can give
	// back what this call took, and only that.
	var held, from, free []string
	for i, k := range ukeys {
		if states[i].held {
			held, from = append(held, k), append(from, states[i].cur)
		} else {
			free = append(free, k)
		}
	}
	if len(free) > 0 {
		got, err := ops.Acquire(free, value, ms(n), false)
		if err != nil {
			return opsError(err)
		}
		if !got {
			return wire.Nil
		}
	}
	done, err := ops.Reassign(held, from, value, ms(n))
	if err != nil || !done {
		for _, k := range free {
			_, _ = ops.Release(k, value)
		}
		if err != nil {
			return opsError(err)
		}
		return wire.Nil
	}
	return wire.OK
}

// allHeldBy is the MGET check of redislock's multi-key scripts: every key of
// KEYS holds exactly token.
func allHeldBy(ops Ops, keys []string, token string) bool {
	for _, k := range keys {
		if !heldBy(ops, k, token) {
			return false
		}
	}
	return true
}

// execReleaseAll: if every key of KEYS holds ARGV[1], delete them all and
// reply OK; otherwise reply nil and delete nothing.
func execReleaseAll(ops Ops, keys, argv []string) wire.Reply {
	if !allHeldBy(ops, keys, argv[0]) {
		return wire.Nil
	}
	for _, k := range dedupe(keys) {
		if _, err := ops.Release(k, argv[0]); err != nil {
			return opsError(err)
		}
	}
	return wire.OK
}

// execRefreshAll: if every key of KEYS holds ARGV[1], PEXPIRE each to ARGV[2]
// ms and reply OK; otherwise reply nil.
func execRefreshAll(ops Ops, keys, argv []string) wire.Reply {
	if !allHeldBy(ops, keys, argv[0]) {
		return wire.Nil
	}
	n, bad, ok := pexpireArg(argv[1])
	if !ok {
		return bad
	}
	for _, k := range dedupe(keys) {
		if _, err := pexpire(ops, k, argv[0], n); err != nil {
			return opsError(err)
		}
	}
	return wire.OK
}

// execMinPTTLAll: if every key of KEYS holds ARGV[1], reply the smallest
// positive PTTL among them, or 0 if none has a positive PTTL; otherwise nil.
func execMinPTTLAll(ops Ops, keys, argv []string) wire.Reply {
	if !allHeldBy(ops, keys, argv[0]) {
		return wire.Nil
	}
	var least int64
	for _, k := range keys {
		p, err := ops.PTTL(k)
		if err != nil {
			return opsError(err)
		}
		if p > 0 && (least == 0 || p < least) {
			least = p
		}
	}
	return wire.Int(least)
}

// pyExtendTarget is the shared start of redis-py's extend: the key must hold
// ARGV[1] and have a TTL (PTTL >= 0); it returns that PTTL.
func pyExtendTarget(ops Ops, key, token string) (int64, wire.Reply, bool) {
	if !heldBy(ops, key, token) {
		return 0, wire.Int(0), false
	}
	p, err := ops.PTTL(key)
	if err != nil {
		return 0, opsError(err), false
	}
	if p < 0 {
		return 0, wire.Int(0), false
	}
	return p, wire.Reply{}, true
}

// pyAddTTL is "current PTTL + ARGV[2]" in Lua: the string is coerced to a
// number and the sum is handed to PEXPIRE as a Lua number.
func pyAddTTL(cur int64, add string) (int64, wire.Reply, bool) {
	f, ok := luaToNumber(add)
	if !ok {
		return 0, wire.Error(errArithmetic), false
	}
	n, ok := luaNumberArg(float64(cur) + f)
	if !ok {
		return 0, wire.Error(errNotInteger), false
	}
	if n > maxTTLms {
		return 0, wire.Error(errPexpireRange), false
	}
	return n, wire.Reply{}, true
}

// execPyExtendAdd (redis-py up to 3.4): if KEYS[1] holds ARGV[1] and has a
// TTL, set its TTL to the remaining TTL plus ARGV[2] ms and reply 1; else 0.
func execPyExtendAdd(ops Ops, keys, argv []string) wire.Reply {
	p, r, ok := pyExtendTarget(ops, keys[0], argv[0])
	if !ok {
		return r
	}
	n, bad, ok := pyAddTTL(p, argv[1])
	if !ok {
		return bad
	}
	return intReply(pexpire(ops, keys[0], argv[0], n)) // 0: lost since the check
}

// execPyExtend (redis-py 3.5+): as execPyExtendAdd when ARGV[3] is "0";
// otherwise (replace_ttl, or ARGV[3] absent) the new TTL is ARGV[2] itself.
func execPyExtend(ops Ops, keys, argv []string) wire.Reply {
	p, r, ok := pyExtendTarget(ops, keys[0], argv[0])
	if !ok {
		return r
	}
	var n int64
	var bad wire.Reply
	if len(argv) > 2 && argv[2] == "0" {
		n, bad, ok = pyAddTTL(p, argv[1])
	} else {
		n, bad, ok = pexpireArg(argv[1])
	}
	if !ok {
		return bad
	}
	return intReply(pexpire(ops, keys[0], argv[0], n)) // 0: lost since the check
}

// execPyAcquire (redis-py 2.10 LuaLock): SETNX KEYS[1] ARGV[1]; if it was set
// and ARGV[2] is not empty, PEXPIRE it to ARGV[2] ms; reply 1 if set, else 0.
//
// Unlike Redis, an unparsable ARGV[2] is reported before the key is set:
// Redis would have left the key set without TTL.
func execPyAcquire(ops Ops, keys, argv []string) wire.Reply {
	key, token := keys[0], argv[0]
	var ttl time.Duration
	if argv[1] != "" {
		n, bad, ok := pexpireArg(argv[1])
		if !ok || n <= 0 {
			// Both cases only matter if SETNX would have succeeded.
			if _, held := ops.Get(key); held {
				return wire.Int(0)
			}
			if !ok {
				return bad
			}
			return wire.Int(1) // set, then deleted at once by PEXPIRE <= 0
		}
		ttl = ms(n)
	}
	return intReply(ops.Acquire([]string{key}, token, ttl, false))
}

// execSetNXPX: the reply of SET KEYS[1] ARGV[1] NX PX ARGV[2] itself: OK if
// set, nil if the key exists.
func execSetNXPX(ops Ops, keys, argv []string) wire.Reply {
	ttl, bad, ok := setPXArg(argv[1])
	if !ok {
		return bad
	}
	return okReply(ops.Acquire([]string{keys[0]}, argv[0], ttl, false))
}

// multiArgs is the argument check of node-redlock's multi-key scripts: with
// no keys they do nothing and reply 0; with keys they need ARGV.
func multiArgs(keys, argv []string, n int) (wire.Reply, bool) {
	if len(keys) == 0 {
		return wire.Int(0), false
	}
	if len(argv) < n {
		return wire.Error(fmt.Sprintf("ERR wrong number of arguments for the node-redlock script: need %d arg(s), got %d", n, len(argv))), false
	}
	return wire.Reply{}, true
}

// execAcquireAll (node-redlock v4/v5): if any key of KEYS exists (whoever
// holds it, the caller included) reply 0; otherwise SET every key to ARGV[1]
// with PX ARGV[2] and reply the number of keys (#KEYS).
func execAcquireAll(ops Ops, keys, argv []string) wire.Reply {
	if r, ok := multiArgs(keys, argv, 2); !ok {
		return r
	}
	ttl, bad, ok := setPXArg(argv[1])
	if !ok {
		if anyHeld(ops, keys) {
			return wire.Int(0)
		}
		return bad
	}
	got, err := ops.Acquire(dedupe(keys), argv[0], ttl, false)
	if err != nil {
		return opsError(err)
	}
	if !got {
		return wire.Int(0)
	}
	return wire.Int(int64(len(keys)))
}

// execExtendAll (node-redlock v4/v5): if any key of KEYS does not hold ARGV[1]
// reply 0; otherwise SET every key again with PX ARGV[2] and reply #KEYS.
func execExtendAll(ops Ops, keys, argv []string) wire.Reply {
	if r, ok := multiArgs(keys, argv, 2); !ok {
		return r
	}
	if !allHeldBy(ops, keys, argv[0]) {
		return wire.Int(0)
	}
	ttl, bad, ok := setPXArg(argv[1])
	if !ok {
		return bad
	}
	for _, k := range dedupe(keys) {
		done, err := ops.Extend(k, argv[0], ttl)
		if err != nil {
			return opsError(err)
		}
		if !done {
			return wire.Int(0)
		}
	}
	return wire.Int(int64(len(keys)))
}

// execReleaseEach (node-redlock v4/v5): delete each key of KEYS that holds
// ARGV[1]; reply how many were deleted. A repeated key counts once, because
// it is gone by its second turn.
func execReleaseEach(ops Ops, keys, argv []string) wire.Reply {
	if r, ok := multiArgs(keys, argv, 1); !ok {
		return r
	}
	var count int64
	for _, k := range keys {
		done, err := ops.Release(k, argv[0])
		if err != nil {
			return opsError(err)
		}
		if done {
			count++
		}
	}
	return wire.Int(count)
}

// execRedlockRbLock (redlock-rb): SET KEYS[1] ARGV[1] PX ARGV[2] (replying
// OK) if the key is missing and ARGV[3] is "yes" (a new lock), or if it
// already holds ARGV[1] (an extension); otherwise reply nil.
func execRedlockRbLock(ops Ops, keys, argv []string) wire.Reply {
	key, token := keys[0], argv[0]
	allowNew := len(argv) > 2 && argv[2] == "yes"
	ttl, bad, ok := setPXArg(argv[1])
	if !ok {
		cur, held := ops.Get(key)
		if (!held && allowNew) || (held && cur == token) {
			return bad
		}
		return wire.Nil
	}
	if allowNew {
		got, err := ops.Acquire([]string{key}, token, ttl, false)
		if err != nil {
			return opsError(err)
		}
		if got {
			return wire.OK
		}
	}
	return okReply(ops.Extend(key, token, ttl))
}

// execGetAndPTTL (redlock-rb): reply [GET KEYS[1], PTTL KEYS[1]], i.e. the
// holder's token (nil if free) and the remaining TTL.
func execGetAndPTTL(ops Ops, keys, _ []string) wire.Reply {
	token, held := ops.Get(keys[0])
	p, err := ops.PTTL(keys[0])
	if err != nil {
		return opsError(err)
	}
	first := wire.Nil
	if held {
		first = wire.Bulk(token)
	}
	return wire.Array(first, wire.Int(p))
}

// execPTTLOrZero (pottery): if KEYS[1] holds ARGV[1], reply its PTTL when
// positive and 0 otherwise (no TTL, or just expired); reply 0 if not held.
func execPTTLOrZero(ops Ops, keys, argv []string) wire.Reply {
	if !heldBy(ops, keys[0], argv[0]) {
		return wire.Int(0)
	}
	p, err := ops.PTTL(keys[0])
	if err != nil {
		return opsError(err)
	}
	if p < 0 {
		p = 0
	}
	return wire.Int(p)
}
