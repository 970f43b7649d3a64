package resp

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// ScriptOps is what the recognised lock scripts need from the lock table.
// Keys name locks; values are the holders' tokens.
//
// The executors below never hold state of their own: every decision a script
// makes in Redis is a call here, so the lock table alone decides who holds
// what. A script that needs several calls is not atomic as a whole (unlike
// Lua in Redis); each executor is written so that a concurrent change between
// two calls yields an answer Redis could also have given for some ordering,
// and the calls that change state (Acquire, Release, Extend) re-check the
// token themselves.
type ScriptOps interface {
	// Get returns the token of the lock held under key, if any.
	Get(key string) (token string, held bool)
	// Acquire takes every key for token, all or nothing (a key already held
	// by the same token counts as taken only when reentrant is true), with
	// the given TTL (0 = none). It returns false if any key is held by someone else.
	Acquire(keys []string, token string, ttl time.Duration, reentrant bool) (bool, error)
	// Release deletes key if it is held by token; it reports whether it did.
	Release(key, token string) (bool, error)
	// Extend sets key's TTL to ttl if it is held by token.
	Extend(key, token string, ttl time.Duration) (bool, error)
	// Reassign gives each key, held by from[i], to token with TTL ttl,
	// keeping the lock: Redis's SET of a new value over an old one. All or
	// nothing; false, with nothing changed, when some key is not held by
	// its from token or its hold cannot change hands in place.
	Reassign(keys, from []string, token string, ttl time.Duration) (bool, error)
	// PTTL is the remaining TTL in ms: -2 if key is not held, -1 if held without TTL.
	PTTL(key string) (int64, error)
}

// The reply type is the wire format's; these names keep the executors
// short until they move to a package of their own.
type (
	Reply     = wire.Reply
	ReplyKind = wire.ReplyKind
)

const (
	ReplyNil    = wire.ReplyNil
	ReplyInt    = wire.ReplyInt
	ReplyStatus = wire.ReplyStatus
	ReplyBulk   = wire.ReplyBulk
	ReplyArray  = wire.ReplyArray
	ReplyError  = wire.ReplyError
)

var (
	intReply    = wire.Int
	statusReply = wire.Status
	bulkReply   = wire.Bulk
	arrayReply  = wire.Array
	errorReply  = wire.Error
	nilReply    = wire.Nil
	okReply     = wire.OK
)

// AppendReply is wire.AppendReply.
func AppendReply(dst []byte, r Reply, resp3 bool) []byte { return wire.AppendReply(dst, r, resp3) }

// Client names one lock client and the versions of it that send a body.
type Client struct {
	Name     string // e.g. "go-redsync/redsync"
	Versions string // e.g. "v4.12.0–v4.18.1"
}

// Verification says how a catalogue entry's SHA1 is known to be right.
type Verification uint8

const (
	// RealClient: the test suite drives the real client library against a
	// real redis-server and checks the SHA1 and replies it observes.
	RealClient Verification = iota + 1
	// PublishedBody: the test suite reads the body from the client's
	// published package (Go module cache, npm tarball), checks its SHA1
	// and runs it on a real redis-server side by side with the executor;
	// no test drives the client library itself.
	PublishedBody
	// SourceHash: computed from the client's published source (string
	// literal evaluated as the client's language builds it); not exercised
	// by the tests against Redis.
	SourceHash
)

func (v Verification) String() string {
	switch v {
	case RealClient:
		return "real client"
	case PublishedBody:
		return "published body on redis-server"
	case SourceHash:
		return "hash from source"
	}
	return "unknown"
}

// Script is one catalogue entry: one exact script body, as one or more client
// versions send it, and the native implementation of what it does.
type Script struct {
	ID       string   // stable identifier, e.g. "redsync/delete-v4.12"
	Family   string   // client family as shown in the unsupported-script error, e.g. "redsync v4"
	Op       string   // operation name within the family, e.g. "delete"
	Clients  []Client // every client/version range that sends exactly this body
	SHA1     string   // SHA1 of the exact body: what EVALSHA names and SCRIPT LOAD returns
	NormSHA1 string   // SHA1 of Normalize(body)
	Verified Verification
	// Semantics names the behaviour; entries with the same Semantics run the
	// same executor and return the same replies.
	Semantics string
	Replies   string // the reply values, as documented in docs/compatibility.md
	MinKeys   int    // fewer KEYS than this is an argument error
	MinArgs   int    // fewer ARGV than this is an argument error
	// TTLReply marks scripts whose integer reply is a remaining TTL, which a
	// replay can only compare approximately.
	TTLReply bool

	exec func(ops ScriptOps, keys, argv []string) Reply
}

// Exec runs the script natively against ops. Argument errors and lock-table
// errors come back as Redis-style error replies, never as panics.
func (s *Script) Exec(ops ScriptOps, keys, argv []string) Reply {
	if len(keys) < s.MinKeys || len(argv) < s.MinArgs {
		return errorReply(fmt.Sprintf(
			"ERR wrong number of arguments for the %s %s script: need at least %d key(s) and %d arg(s), got %d and %d",
			s.Family, s.Op, s.MinKeys, s.MinArgs, len(keys), len(argv)))
	}
	return s.exec(ops, keys, argv)
}

var (
	bySHA  = map[string]*Script{}
	byNorm = map[string]*Script{}
)

func init() {
	for _, s := range catalogue {
		if _, dup := bySHA[s.SHA1]; dup {
			panic("resp: duplicate script SHA1 " + s.SHA1)
		}
		bySHA[s.SHA1] = s
		// The first entry wins for a normalised body; entries that share one
		// share their semantics (checked by the tests).
		if _, ok := byNorm[s.NormSHA1]; !ok {
			byNorm[s.NormSHA1] = s
		}
	}
}

// Catalogue returns every known script, in catalogue order. The slice is a
// copy; the entries are shared and must not be modified.
func Catalogue() []*Script {
	return append([]*Script(nil), catalogue...)
}

// LookupSHA finds a script by the SHA1 of its exact body, as EVALSHA names it
// (case-insensitively, as Redis does).
func LookupSHA(sha string) (*Script, bool) {
	s, ok := bySHA[strings.ToLower(sha)]
	return s, ok
}

// Recognize finds the script an EVAL body is: by the SHA1 of the exact body
// first, then by the SHA1 of its normalised form, which catches copies of a
// client's script with different indentation, line endings or comments.
func Recognize(body string) (*Script, bool) {
	if s, ok := bySHA[SHA1Hex(body)]; ok {
		return s, true
	}
	s, ok := byNorm[SHA1Hex(Normalize(body))]
	return s, ok
}

// SHA1Hex is the lower-case hex SHA1 of s, the form Redis uses for script names.
func SHA1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// Supported lists the recognised scripts by client family, for the error an
// unknown script gets and for logs.
func Supported() []string {
	var order []string
	ops := map[string][]string{}
	for _, s := range catalogue {
		if _, ok := ops[s.Family]; !ok {
			order = append(order, s.Family)
		}
		if !contains(ops[s.Family], s.Op) {
			ops[s.Family] = append(ops[s.Family], s.Op)
		}
	}
	out := make([]string, len(order))
	for i, f := range order {
		out[i] = f + " " + strings.Join(ops[f], "/")
	}
	return out
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// UnsupportedScriptError is the reply for a script that is not in the
// catalogue. It names what is supported so that the operator can tell a
// client mismatch from a bug at a glance.
func UnsupportedScriptError(sha string) Reply {
	return errorReply(fmt.Sprintf("ERR this is a lock proxy; unsupported script (sha %s). Supported: %s. See docs/compatibility.md",
		strings.ToLower(sha), strings.Join(Supported(), ", ")))
}

// The Redis error texts the scripts can surface. Redis appends the script
// location to errors raised inside Lua; clients only look at the code.
const (
	errNotInteger   = "ERR value is not an integer or out of range"
	errSetExpire    = "ERR invalid expire time in 'set' command"
	errPexpireRange = "ERR invalid expire time in 'pexpire' command"
	errArithmetic   = "ERR user_script: attempt to perform arithmetic on a non-number value"
)

func opsError(err error) Reply {
	msg := err.Error()
	// Keep an error code the lock table chose (e.g. "WRONGTYPE ..."); add the
	// generic one otherwise, as every RESP error needs one.
	if code, _, ok := strings.Cut(msg, " "); ok && code != "" && strings.Trim(code, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == "" {
		return errorReply(msg)
	}
	return errorReply("ERR " + msg)
}

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
func pexpireArg(s string) (int64, Reply, bool) {
	v, ok := parseRedisInt(s)
	if !ok {
		return 0, errorReply(errNotInteger), false
	}
	if v > maxTTLms {
		return 0, errorReply(errPexpireRange), false
	}
	return v, Reply{}, true
}

// setPXArg parses the PX argument of SET, which must be positive.
func setPXArg(s string) (time.Duration, Reply, bool) {
	v, ok := parseRedisInt(s)
	if !ok {
		return 0, errorReply(errNotInteger), false
	}
	if v <= 0 || v > maxTTLms {
		return 0, errorReply(errSetExpire), false
	}
	return ms(v), Reply{}, true
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

func heldBy(ops ScriptOps, key, token string) bool {
	cur, held := ops.Get(key)
	return held && cur == token
}

// pexpire applies PEXPIRE to a key held by token. Redis deletes the key when
// the TTL is not positive and still answers 1, so that is done here too.
func pexpire(ops ScriptOps, key, token string, n int64) (bool, error) {
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
func reobtain(ops ScriptOps, key, cur string, held bool, value string, ttl time.Duration) (bool, error) {
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
func execRelease(ops ScriptOps, keys, argv []string) Reply {
	ok, err := ops.Release(keys[0], argv[0])
	if err != nil {
		return opsError(err)
	}
	if ok {
		return intReply(1)
	}
	return intReply(0)
}

// execReleaseTristate: as execRelease, but a missing key replies -1 so that
// the client can report that the lock had already expired.
func execReleaseTristate(ops ScriptOps, keys, argv []string) Reply {
	ok, err := ops.Release(keys[0], argv[0])
	if err != nil {
		return opsError(err)
	}
	if ok {
		return intReply(1)
	}
	if _, held := ops.Get(keys[0]); !held {
		return intReply(-1)
	}
	return intReply(0)
}

// execExtend: if KEYS[1] holds ARGV[1], PEXPIRE it to ARGV[2] ms and reply 1;
// otherwise reply 0 without looking at ARGV[2].
func execExtend(ops ScriptOps, keys, argv []string) Reply {
	n, bad, ok := pexpireArg(argv[1])
	if !ok {
		if heldBy(ops, keys[0], argv[0]) {
			return bad
		}
		return intReply(0)
	}
	done, err := pexpire(ops, keys[0], argv[0], n)
	if err != nil {
		return opsError(err)
	}
	if done {
		return intReply(1)
	}
	return intReply(0)
}

// execExtendOrAcquire: if KEYS[1] holds ARGV[1], PEXPIRE it to ARGV[2] ms;
// otherwise try SET KEYS[1] ARGV[1] PX ARGV[2] NX. Reply 1 if either worked,
// else 0. An unparsable TTL is an error on both paths.
func execExtendOrAcquire(ops ScriptOps, keys, argv []string) Reply {
	key, token := keys[0], argv[0]
	n, bad, ok := pexpireArg(argv[1])
	if ok {
		done, err := pexpire(ops, key, token, n)
		if err != nil {
			return opsError(err)
		}
		if done {
			return intReply(1)
		}
	} else if heldBy(ops, key, token) {
		return bad
	}
	ttl, bad, ok := setPXArg(argv[1])
	if !ok {
		return bad
	}
	got, err := ops.Acquire([]string{key}, token, ttl, false)
	if err != nil {
		return opsError(err)
	}
	if got {
		return intReply(1)
	}
	return intReply(0)
}

// execPTTLOrMinus3: if KEYS[1] holds ARGV[1], reply its PTTL (ms, or -1
// without TTL); otherwise reply -3, a value PTTL itself never returns.
func execPTTLOrMinus3(ops ScriptOps, keys, argv []string) Reply {
	if !heldBy(ops, keys[0], argv[0]) {
		return intReply(-3)
	}
	p, err := ops.PTTL(keys[0])
	if err != nil {
		return opsError(err)
	}
	return intReply(p)
}

// luaOffset is tonumber(ARGV[2]) used as a GETRANGE bound: a non-number fails
// in Lua arithmetic, a fraction fails GETRANGE's integer parsing.
func luaOffset(s string) (int64, Reply, bool) {
	f, ok := luaToNumber(s)
	if !ok {
		return 0, errorReply(errArithmetic), false
	}
	n, ok := luaNumberArg(f - 1)
	if !ok {
		return 0, errorReply(errNotInteger), false
	}
	return n + 1, Reply{}, true
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
func ownsByPrefix(cur string, held bool, value string, offset int64) (bool, Reply) {
	if !prefixMatches(cur, value, offset) {
		return false, nilReply
	}
	if offset < 1 && held && cur != value {
		return false, errorReply(fmt.Sprintf(errNoToken, offset))
	}
	return true, Reply{}
}

// execObtainPrefix: SET KEYS[1] ARGV[1] NX PX ARGV[3]; reply OK if it was
// set. Otherwise, if the current value starts with the same ARGV[2]-byte
// token, overwrite it with ARGV[1] and PX ARGV[3] (re-obtain with new
// metadata) and reply OK; else reply nil.
func execObtainPrefix(ops ScriptOps, keys, argv []string) Reply {
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
		return okReply
	}
	offset, bad, ok := luaOffset(argv[1])
	if !ok {
		return bad
	}
	cur, held := ops.Get(key)
	if mine, r := ownsByPrefix(cur, held, value, offset); !mine {
		return r
	}
	done, err := reobtain(ops, key, cur, held, value, ttl)
	if err != nil {
		return opsError(err)
	}
	if !done {
		return nilReply
	}
	return okReply
}

// execObtainMulti: MSETNX every key of KEYS to ARGV[1]; if that fails because
// some key exists, go on only if every key's value starts with the same
// ARGV[2]-byte token (a missing key does not, unless the token is empty), and
// then MSET them all. Either way, PEXPIRE every key to ARGV[3] and reply OK;
// reply nil if the token check failed.
//
// Unlike Redis, an unparsable ARGV[3] is reported before any key is set:
// Redis would have left the keys set without TTL.
func execObtainMulti(ops ScriptOps, keys, argv []string) Reply {
	value := argv[0]
	n, bad, ok := pexpireArg(argv[2])
	ukeys := dedupe(keys)
	if ok && n > 0 {
		got, err := ops.Acquire(ukeys, value, ms(n), false)
		if err != nil {
			return opsError(err)
		}
		if got {
			return okReply
		}
	} else {
		free := true
		for _, k := range ukeys {
			if _, held := ops.Get(k); held {
				free = false
				break
			}
		}
		if free {
			if !ok {
				return bad
			}
			return okReply // set, then deleted at once by a non-positive PEXPIRE
		}
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
		return okReply
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
			return nilReply
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
		return nilReply
	}
	return okReply
}

// allHeldBy is the MGET check of redislock's multi-key scripts: every key of
// KEYS holds exactly token.
func allHeldBy(ops ScriptOps, keys []string, token string) bool {
	for _, k := range keys {
		if !heldBy(ops, k, token) {
			return false
		}
	}
	return true
}

// execReleaseAll: if every key of KEYS holds ARGV[1], delete them all and
// reply OK; otherwise reply nil and delete nothing.
func execReleaseAll(ops ScriptOps, keys, argv []string) Reply {
	if !allHeldBy(ops, keys, argv[0]) {
		return nilReply
	}
	for _, k := range dedupe(keys) {
		if _, err := ops.Release(k, argv[0]); err != nil {
			return opsError(err)
		}
	}
	return okReply
}

// execRefreshAll: if every key of KEYS holds ARGV[1], PEXPIRE each to ARGV[2]
// ms and reply OK; otherwise reply nil.
func execRefreshAll(ops ScriptOps, keys, argv []string) Reply {
	if !allHeldBy(ops, keys, argv[0]) {
		return nilReply
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
	return okReply
}

// execMinPTTLAll: if every key of KEYS holds ARGV[1], reply the smallest
// positive PTTL among them, or 0 if none has a positive PTTL; otherwise nil.
func execMinPTTLAll(ops ScriptOps, keys, argv []string) Reply {
	if !allHeldBy(ops, keys, argv[0]) {
		return nilReply
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
	return intReply(least)
}

// pyExtendTarget is the shared start of redis-py's extend: the key must hold
// ARGV[1] and have a TTL (PTTL >= 0); it returns that PTTL.
func pyExtendTarget(ops ScriptOps, key, token string) (int64, Reply, bool) {
	if !heldBy(ops, key, token) {
		return 0, intReply(0), false
	}
	p, err := ops.PTTL(key)
	if err != nil {
		return 0, opsError(err), false
	}
	if p < 0 {
		return 0, intReply(0), false
	}
	return p, Reply{}, true
}

// pyAddTTL is "current PTTL + ARGV[2]" in Lua: the string is coerced to a
// number and the sum is handed to PEXPIRE as a Lua number.
func pyAddTTL(cur int64, add string) (int64, Reply, bool) {
	f, ok := luaToNumber(add)
	if !ok {
		return 0, errorReply(errArithmetic), false
	}
	n, ok := luaNumberArg(float64(cur) + f)
	if !ok {
		return 0, errorReply(errNotInteger), false
	}
	if n > maxTTLms {
		return 0, errorReply(errPexpireRange), false
	}
	return n, Reply{}, true
}

func pyPexpire(ops ScriptOps, key, token string, n int64) Reply {
	done, err := pexpire(ops, key, token, n)
	if err != nil {
		return opsError(err)
	}
	if !done {
		return intReply(0) // lost between the check and the PEXPIRE
	}
	return intReply(1)
}

// execPyExtendAdd (redis-py up to 3.4): if KEYS[1] holds ARGV[1] and has a
// TTL, set its TTL to the remaining TTL plus ARGV[2] ms and reply 1; else 0.
func execPyExtendAdd(ops ScriptOps, keys, argv []string) Reply {
	p, r, ok := pyExtendTarget(ops, keys[0], argv[0])
	if !ok {
		return r
	}
	n, bad, ok := pyAddTTL(p, argv[1])
	if !ok {
		return bad
	}
	return pyPexpire(ops, keys[0], argv[0], n)
}

// execPyExtend (redis-py 3.5+): as execPyExtendAdd when ARGV[3] is "0";
// otherwise (replace_ttl, or ARGV[3] absent) the new TTL is ARGV[2] itself.
func execPyExtend(ops ScriptOps, keys, argv []string) Reply {
	p, r, ok := pyExtendTarget(ops, keys[0], argv[0])
	if !ok {
		return r
	}
	var n int64
	var bad Reply
	if len(argv) > 2 && argv[2] == "0" {
		n, bad, ok = pyAddTTL(p, argv[1])
	} else {
		n, bad, ok = pexpireArg(argv[1])
	}
	if !ok {
		return bad
	}
	return pyPexpire(ops, keys[0], argv[0], n)
}

// execPyAcquire (redis-py 2.10 LuaLock): SETNX KEYS[1] ARGV[1]; if it was set
// and ARGV[2] is not empty, PEXPIRE it to ARGV[2] ms; reply 1 if set, else 0.
//
// Unlike Redis, an unparsable ARGV[2] is reported before the key is set:
// Redis would have left the key set without TTL.
func execPyAcquire(ops ScriptOps, keys, argv []string) Reply {
	key, token := keys[0], argv[0]
	var ttl time.Duration
	if argv[1] != "" {
		n, bad, ok := pexpireArg(argv[1])
		if !ok || n <= 0 {
			// Both cases only matter if SETNX would have succeeded.
			if _, held := ops.Get(key); held {
				return intReply(0)
			}
			if !ok {
				return bad
			}
			return intReply(1) // set, then deleted at once by PEXPIRE <= 0
		}
		ttl = ms(n)
	}
	got, err := ops.Acquire([]string{key}, token, ttl, false)
	if err != nil {
		return opsError(err)
	}
	if got {
		return intReply(1)
	}
	return intReply(0)
}

// execSetNXPX: the reply of SET KEYS[1] ARGV[1] NX PX ARGV[2] itself: OK if
// set, nil if the key exists.
func execSetNXPX(ops ScriptOps, keys, argv []string) Reply {
	ttl, bad, ok := setPXArg(argv[1])
	if !ok {
		return bad
	}
	got, err := ops.Acquire([]string{keys[0]}, argv[0], ttl, false)
	if err != nil {
		return opsError(err)
	}
	if got {
		return okReply
	}
	return nilReply
}

// multiArgs is the argument check of node-redlock's multi-key scripts: with
// no keys they do nothing and reply 0; with keys they need ARGV.
func multiArgs(keys, argv []string, n int) (Reply, bool) {
	if len(keys) == 0 {
		return intReply(0), false
	}
	if len(argv) < n {
		return errorReply(fmt.Sprintf("ERR wrong number of arguments for the node-redlock script: need %d arg(s), got %d", n, len(argv))), false
	}
	return Reply{}, true
}

// execAcquireAll (node-redlock v4/v5): if any key of KEYS exists (whoever
// holds it, the caller included) reply 0; otherwise SET every key to ARGV[1]
// with PX ARGV[2] and reply the number of keys (#KEYS).
func execAcquireAll(ops ScriptOps, keys, argv []string) Reply {
	if r, ok := multiArgs(keys, argv, 2); !ok {
		return r
	}
	ttl, bad, ok := setPXArg(argv[1])
	if !ok {
		for _, k := range keys {
			if _, held := ops.Get(k); held {
				return intReply(0)
			}
		}
		return bad
	}
	got, err := ops.Acquire(dedupe(keys), argv[0], ttl, false)
	if err != nil {
		return opsError(err)
	}
	if !got {
		return intReply(0)
	}
	return intReply(int64(len(keys)))
}

// execExtendAll (node-redlock v4/v5): if any key of KEYS does not hold ARGV[1]
// reply 0; otherwise SET every key again with PX ARGV[2] and reply #KEYS.
func execExtendAll(ops ScriptOps, keys, argv []string) Reply {
	if r, ok := multiArgs(keys, argv, 2); !ok {
		return r
	}
	if !allHeldBy(ops, keys, argv[0]) {
		return intReply(0)
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
			return intReply(0)
		}
	}
	return intReply(int64(len(keys)))
}

// execReleaseEach (node-redlock v4/v5): delete each key of KEYS that holds
// ARGV[1]; reply how many were deleted. A repeated key counts once, because
// it is gone by its second turn.
func execReleaseEach(ops ScriptOps, keys, argv []string) Reply {
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
	return intReply(count)
}

// execRedlockRbLock (redlock-rb): SET KEYS[1] ARGV[1] PX ARGV[2] (replying
// OK) if the key is missing and ARGV[3] is "yes" (a new lock), or if it
// already holds ARGV[1] (an extension); otherwise reply nil.
func execRedlockRbLock(ops ScriptOps, keys, argv []string) Reply {
	key, token := keys[0], argv[0]
	allowNew := len(argv) > 2 && argv[2] == "yes"
	ttl, bad, ok := setPXArg(argv[1])
	if !ok {
		cur, held := ops.Get(key)
		if (!held && allowNew) || (held && cur == token) {
			return bad
		}
		return nilReply
	}
	if allowNew {
		got, err := ops.Acquire([]string{key}, token, ttl, false)
		if err != nil {
			return opsError(err)
		}
		if got {
			return okReply
		}
	}
	done, err := ops.Extend(key, token, ttl)
	if err != nil {
		return opsError(err)
	}
	if done {
		return okReply
	}
	return nilReply
}

// execGetAndPTTL (redlock-rb): reply [GET KEYS[1], PTTL KEYS[1]], i.e. the
// holder's token (nil if free) and the remaining TTL.
func execGetAndPTTL(ops ScriptOps, keys, _ []string) Reply {
	token, held := ops.Get(keys[0])
	p, err := ops.PTTL(keys[0])
	if err != nil {
		return opsError(err)
	}
	first := nilReply
	if held {
		first = bulkReply(token)
	}
	return arrayReply(first, intReply(p))
}

// execPTTLOrZero (pottery): if KEYS[1] holds ARGV[1], reply its PTTL when
// positive and 0 otherwise (no TTL, or just expired); reply 0 if not held.
func execPTTLOrZero(ops ScriptOps, keys, argv []string) Reply {
	if !heldBy(ops, keys[0], argv[0]) {
		return intReply(0)
	}
	p, err := ops.PTTL(keys[0])
	if err != nil {
		return opsError(err)
	}
	if p < 0 {
		p = 0
	}
	return intReply(p)
}

// ---------------------------------------------------------------------------
// The catalogue. One entry per exact body; the SHA1s were computed from each
// client's published source, evaluating the string literal the way the
// client's language builds it (Go raw strings, Python triple-quoted strings
// inside an indented class body, JavaScript template literals, Ruby <<-
// heredocs, which keep their indentation and end with a newline). The bodies
// themselves are not reproduced here. Version ranges are the releases whose
// source carries that exact body.

const (
	famRedsync   = "redsync v4"
	famRedislock = "redislock"
	famRedisPy   = "redis-py Lock"
	famRedlockJS = "node-redlock v3-v5"
	famRedlockRb = "redlock-rb"
	famPottery   = "pottery Redlock"
)

var catalogue = []*Script{
	// go-redsync/redsync v4. Lock is a plain SET NX PX; these scripts release
	// and extend. The delete script gained the -1 (already expired) reply in
	// v4.12.0; the touch-with-SETNX variant is used with WithSetNXOnExtend.
	{
		ID: "redsync/delete-v4.0", Family: famRedsync, Op: "delete",
		Clients:  []Client{{"go-redsync/redsync", "v4.0.0–v4.11.0"}},
		SHA1:     "00583931c4e4d483f6233879c133c71ed5393f9d",
		NormSHA1: "291e8c6bd642e1e50ba3b90238fb62ab2071837a",
		Verified: PublishedBody, Semantics: "release", Replies: "1 deleted; 0 not held by token",
		MinKeys: 1, MinArgs: 1, exec: execRelease,
	},
	{
		ID: "redsync/delete", Family: famRedsync, Op: "delete",
		Clients:  []Client{{"go-redsync/redsync", "v4.12.0–v4.18.1"}},
		SHA1:     "e950836ed1e694540c503ef9972b8de518044d3b",
		NormSHA1: "7993caa3740134efbd5ac97c8695f767f80951db",
		Verified: RealClient, Semantics: "release-tristate", Replies: "1 deleted; 0 held by another token; -1 missing",
		MinKeys: 1, MinArgs: 1, exec: execReleaseTristate,
	},
	{
		ID: "redsync/touch", Family: famRedsync, Op: "touch",
		Clients:  []Client{{"go-redsync/redsync", "v4.0.0–v4.18.1"}},
		SHA1:     "d75bb8b5bd13532ddedd17762e772346e39b321e",
		NormSHA1: "eab2bb9c2bd5ff466b3bf28d23e0a6be0b63e807",
		Verified: RealClient, Semantics: "extend", Replies: "1 extended; 0 not held by token",
		MinKeys: 1, MinArgs: 2, exec: execExtend,
	},
	{
		ID: "redsync/touch-setnx", Family: famRedsync, Op: "touch-or-acquire",
		Clients:  []Client{{"go-redsync/redsync", "v4.12.0–v4.18.1 (WithSetNXOnExtend)"}},
		SHA1:     "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79",
		NormSHA1: "093198007cadcfa2b840a96c0c99c7729de3bfa0",
		Verified: RealClient, Semantics: "extend-or-acquire", Replies: "1 extended or acquired; 0 held by another token",
		MinKeys: 1, MinArgs: 2, exec: execExtendOrAcquire,
	},

	// bsm/redislock up to v0.9.x (single key) and node-redlock v3, which send
	// byte-identical release and extend bodies. redislock v0.9.0–v0.9.3
	// obtain with a plain SET NX PX; v0.9.4 added the obtain script, which
	// also re-obtains a lock whose value starts with the same token.
	{
		ID: "redislock/release", Family: famRedislock, Op: "release",
		Clients:  []Client{{"bsm/redislock", "v0.8.0–v0.9.4"}, {"node-redlock", "v3.0.0–v3.1.2 (unlock)"}},
		SHA1:     "cf0e94b2e9ffc7e04395cf88f7583fc309985910",
		NormSHA1: "278b7fc39f087c6276c7b7c08962022c4fe73ba6",
		Verified: RealClient, Semantics: "release", Replies: "1 deleted; 0 not held by token",
		MinKeys: 1, MinArgs: 1, exec: execRelease,
	},
	{
		ID: "redislock/refresh", Family: famRedislock, Op: "refresh",
		Clients:  []Client{{"bsm/redislock", "v0.8.0–v0.9.4"}, {"node-redlock", "v3.0.0–v3.1.2 (extend)"}},
		SHA1:     "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf",
		NormSHA1: "43e9817a622cba86ea5a7b09b0c27646e33f4699",
		Verified: RealClient, Semantics: "extend", Replies: "1 extended; 0 not held by token",
		MinKeys: 1, MinArgs: 2, exec: execExtend,
	},
	{
		ID: "redislock/pttl", Family: famRedislock, Op: "pttl",
		Clients:  []Client{{"bsm/redislock", "v0.8.0–v0.9.4"}},
		SHA1:     "6484da7d58920897fdc22b7f9afd1a3d47524ea8",
		NormSHA1: "2a7eeb58bfd3bfd5e34ac2be357d77d7a0039f6a",
		Verified: RealClient, Semantics: "pttl-or-minus3", Replies: "PTTL in ms (-1 no TTL); -3 not held by token",
		MinKeys: 1, MinArgs: 1, TTLReply: true, exec: execPTTLOrMinus3,
	},
	{
		ID: "redislock/obtain-v0.9", Family: famRedislock, Op: "obtain",
		Clients:  []Client{{"bsm/redislock", "v0.9.4"}},
		SHA1:     "80a1b5f2cfccec3b7119ba7721d2127682b691a7",
		NormSHA1: "42dbf8a0109452946aab1cee671db213d843abc6",
		Verified: RealClient, Semantics: "obtain-prefix", Replies: "OK (status) obtained or re-obtained; nil held by another token",
		MinKeys: 1, MinArgs: 3, exec: execObtainPrefix,
	},

	// bsm/redislock v0.10.x: every script takes any number of keys (one lock
	// over several keys, all or nothing).
	{
		ID: "redislock/obtain-v0.10", Family: famRedislock, Op: "obtain",
		Clients:  []Client{{"bsm/redislock", "v0.10.0"}},
		SHA1:     "eb0c00d98f6f33b4262419a509002884540f30be",
		NormSHA1: "cc316b783714c963a08dee836e4e12e2943eb8e8",
		Verified: PublishedBody, Semantics: "obtain-multi-prefix", Replies: "OK (status) obtained or re-obtained; nil some key held by another token",
		MinKeys: 1, MinArgs: 3, exec: execObtainMulti,
	},
	{
		ID: "redislock/release-v0.10", Family: famRedislock, Op: "release",
		Clients:  []Client{{"bsm/redislock", "v0.10.0"}},
		SHA1:     "9470c810040e272ee6c579d8d4331aaf6332a7b1",
		NormSHA1: "a21da2c9d6ef172c13365d68de8c6b3be57cd153",
		Verified: PublishedBody, Semantics: "release-all", Replies: "OK (status) all deleted; nil some key not held by token (nothing deleted)",
		MinKeys: 1, MinArgs: 1, exec: execReleaseAll,
	},
	{
		ID: "redislock/refresh-v0.10", Family: famRedislock, Op: "refresh",
		Clients:  []Client{{"bsm/redislock", "v0.10.0"}},
		SHA1:     "5a22d7e8431313862816d4416b5e46dd70fc340d",
		NormSHA1: "47ab636bc3cfd74bcce2e1da3fbadeaf0780adf2",
		Verified: PublishedBody, Semantics: "refresh-all", Replies: "OK (status) all extended; nil some key not held by token",
		MinKeys: 1, MinArgs: 2, exec: execRefreshAll,
	},
	{
		ID: "redislock/pttl-v0.10", Family: famRedislock, Op: "pttl",
		Clients:  []Client{{"bsm/redislock", "v0.10.0"}},
		SHA1:     "66e1084c2d842a7e8c271925aae90219fac4e129",
		NormSHA1: "67b4f502051effbba4e88871c0d7a41d91e1509a",
		Verified: PublishedBody, Semantics: "min-pttl-all", Replies: "smallest positive PTTL in ms, 0 if none; nil some key not held by token",
		MinKeys: 1, MinArgs: 1, TTLReply: true, exec: execMinPTTLAll,
	},

	// redis-py redis.lock.Lock (and redis.asyncio.lock.Lock, which shares the
	// bodies). Acquire is a plain SET NX PX since 3.0; 2.10's LuaLock used a
	// script. ARGV[2] of extend is additional_time in ms; ARGV[3] (3.5+) is
	// "1" to replace the TTL and "0" to add to it.
	{
		ID: "redis-py/release", Family: famRedisPy, Op: "release",
		Clients:  []Client{{"redis-py", "2.10.0–8.1.0"}},
		SHA1:     "c3f8721cbb97f72bc19e972846bd7aaf91901658",
		NormSHA1: "8e70260bd12c5dab86e1cf83fd5955b048718fce",
		Verified: RealClient, Semantics: "release", Replies: "1 deleted; 0 not held by token",
		MinKeys: 1, MinArgs: 1, exec: execRelease,
	},
	{
		ID: "redis-py/extend", Family: famRedisPy, Op: "extend",
		Clients:  []Client{{"redis-py", "3.5.0–8.1.0"}},
		SHA1:     "a4e8783852e6b949f9ef3a97212805108459a890",
		NormSHA1: "e0e60b27f37c359e8ad4f24d0c6a71367274a7f2",
		Verified: RealClient, Semantics: "py-extend", Replies: "1 extended; 0 not held by token, or held without TTL",
		MinKeys: 1, MinArgs: 2, exec: execPyExtend,
	},
	{
		ID: "redis-py/extend-add", Family: famRedisPy, Op: "extend",
		Clients:  []Client{{"redis-py", "2.10.0–3.4.1"}},
		SHA1:     "4a484ac024e9b025224cd9f8e1d59dbf3c15d00d",
		NormSHA1: "04836475b3378f3f78b20c6dbb3be27642366221",
		Verified: SourceHash, Semantics: "py-extend-add", Replies: "1 extended; 0 not held by token, or held without TTL",
		MinKeys: 1, MinArgs: 2, exec: execPyExtendAdd,
	},
	{
		ID: "redis-py/reacquire", Family: famRedisPy, Op: "reacquire",
		Clients:  []Client{{"redis-py", "3.1.0–8.1.0"}},
		SHA1:     "1cac51482acf5858da00f6d685d68f886cd6b6b2",
		NormSHA1: "f278027ae1d0b7be9acd85eeddcb9d61d0fb5f81",
		Verified: RealClient, Semantics: "extend", Replies: "1 TTL reset; 0 not held by token",
		MinKeys: 1, MinArgs: 2, exec: execExtend,
	},
	{
		ID: "redis-py/acquire-2.10", Family: famRedisPy, Op: "acquire",
		Clients:  []Client{{"redis-py", "2.10.0–2.10.6 (LuaLock)"}},
		SHA1:     "5688a2541c9edd77746bcd2385e65ff3639a664f",
		NormSHA1: "fd5020658fa387ee853c7fcf52922886700a8b44",
		Verified: SourceHash, Semantics: "py-acquire", Replies: "1 acquired; 0 held",
		MinKeys: 1, MinArgs: 2, exec: execPyAcquire,
	},

	// node-redlock. v3 shares release/extend with redislock (above) and has
	// its own single-key lock; v4 and v5 use multi-key scripts whose bodies
	// differ between releases only in indentation and, in v4.0.0, in
	// table.getn(KEYS) for #KEYS.
	{
		ID: "node-redlock/lock-v3", Family: famRedlockJS, Op: "acquire",
		Clients:  []Client{{"node-redlock", "v3.0.0–v3.1.2"}},
		SHA1:     "862f31bf38e9b63ce28d6e9e5143551bb34ef981",
		NormSHA1: "14d3bdded247160c6b86c7101b069fd841a18ace",
		Verified: PublishedBody, Semantics: "set-nx-px", Replies: "OK (status) acquired; nil held",
		MinKeys: 1, MinArgs: 2, exec: execSetNXPX,
	},
	{
		ID: "node-redlock/acquire-v4.0", Family: famRedlockJS, Op: "acquire",
		Clients:  []Client{{"node-redlock", "v4.0.0"}},
		SHA1:     "d01fb69e6ecc8bad3ca9bacba9f4f9e96862313f",
		NormSHA1: "5bc16a755c30caf54d7fd7bde02e9b34632e9846",
		Verified: PublishedBody, Semantics: "acquire-all", Replies: "#KEYS acquired; 0 some key exists",
		exec: execAcquireAll,
	},
	{
		ID: "node-redlock/acquire-v4", Family: famRedlockJS, Op: "acquire",
		Clients:  []Client{{"node-redlock", "v4.1.0–v4.2.0"}},
		SHA1:     "e5a322e2634ef59a516e8ea150cb085afafee684",
		NormSHA1: "edd4ddecf1460b13c093d7cb4fd999c17d3d76d8",
		Verified: PublishedBody, Semantics: "acquire-all", Replies: "#KEYS acquired; 0 some key exists",
		exec: execAcquireAll,
	},
	{
		ID: "node-redlock/acquire-v5", Family: famRedlockJS, Op: "acquire",
		Clients:  []Client{{"node-redlock", "v5.0.0-alpha.0–v5.0.0-beta.2"}},
		SHA1:     "96da70f7716f27d278a5218544df37fd8b0a5e4c",
		NormSHA1: "edd4ddecf1460b13c093d7cb4fd999c17d3d76d8",
		Verified: PublishedBody, Semantics: "acquire-all", Replies: "#KEYS acquired; 0 some key exists",
		exec: execAcquireAll,
	},
	{
		ID: "node-redlock/extend-v4.0", Family: famRedlockJS, Op: "extend",
		Clients:  []Client{{"node-redlock", "v4.0.0"}},
		SHA1:     "acaf90b4697bb48bb5f603e9e613a54df7536c70",
		NormSHA1: "be1fdf0fd785e3494203f029dcb1825e7d1bec67",
		Verified: PublishedBody, Semantics: "extend-all", Replies: "#KEYS extended; 0 some key not held by token",
		exec: execExtendAll,
	},
	{
		ID: "node-redlock/extend-v4.1", Family: famRedlockJS, Op: "extend",
		Clients:  []Client{{"node-redlock", "v4.1.0"}},
		SHA1:     "1d48b4c6fea2cdadc46b3346de5c2eaf121c7bb3",
		NormSHA1: "ad59565c53ba1d8128343d84e98a5aaca5739479",
		Verified: PublishedBody, Semantics: "extend-all", Replies: "#KEYS extended; 0 some key not held by token",
		exec: execExtendAll,
	},
	{
		ID: "node-redlock/extend-v4.2", Family: famRedlockJS, Op: "extend",
		Clients:  []Client{{"node-redlock", "v4.2.0"}},
		SHA1:     "ce46f80993d5dac20dd066eb301a4e37994bdbed",
		NormSHA1: "ad59565c53ba1d8128343d84e98a5aaca5739479",
		Verified: PublishedBody, Semantics: "extend-all", Replies: "#KEYS extended; 0 some key not held by token",
		exec: execExtendAll,
	},
	{
		ID: "node-redlock/extend-v5", Family: famRedlockJS, Op: "extend",
		Clients:  []Client{{"node-redlock", "v5.0.0-alpha.0–v5.0.0-beta.2"}},
		SHA1:     "aed6f382e410db8ba7926d4e5e9aab410bf2a78a",
		NormSHA1: "ad59565c53ba1d8128343d84e98a5aaca5739479",
		Verified: PublishedBody, Semantics: "extend-all", Replies: "#KEYS extended; 0 some key not held by token",
		exec: execExtendAll,
	},
	{
		ID: "node-redlock/release-v4.0", Family: famRedlockJS, Op: "release",
		Clients:  []Client{{"node-redlock", "v4.0.0–v4.1.0"}},
		SHA1:     "517e7ed95f00c0c4a209c6a7afcc6ab797d30b85",
		NormSHA1: "872463717b9d8763339c3b80e81ba68c1dbb28c2",
		Verified: PublishedBody, Semantics: "release-each", Replies: "number of keys deleted",
		exec: execReleaseEach,
	},
	{
		ID: "node-redlock/release-v4.2", Family: famRedlockJS, Op: "release",
		Clients:  []Client{{"node-redlock", "v4.2.0"}},
		SHA1:     "0f0f23b9048b36752b5be114f357ba083449f908",
		NormSHA1: "872463717b9d8763339c3b80e81ba68c1dbb28c2",
		Verified: PublishedBody, Semantics: "release-each", Replies: "number of keys deleted",
		exec: execReleaseEach,
	},
	{
		ID: "node-redlock/release-v5", Family: famRedlockJS, Op: "release",
		Clients:  []Client{{"node-redlock", "v5.0.0-alpha.0–v5.0.0-beta.2"}},
		SHA1:     "e4612211c9f8f51c257e26e056b0a654b3187242",
		NormSHA1: "872463717b9d8763339c3b80e81ba68c1dbb28c2",
		Verified: PublishedBody, Semantics: "release-each", Replies: "number of keys deleted",
		exec: execReleaseEach,
	},

	// redlock-rb. One lock script does both lock (ARGV[3] "yes") and extend
	// (ARGV[3] "no", extend_only_if_locked). 1.2.2 re-indented the bodies;
	// the older indentation is kept for clients that still EVALSHA it.
	{
		ID: "redlock-rb/lock", Family: famRedlockRb, Op: "lock",
		Clients:  []Client{{"redlock-rb", "1.2.2–2.0.6"}},
		SHA1:     "ceb2b2062e40c51a2b3963fd078bc71f11bdc65c",
		NormSHA1: "c9855e949e327b829040c8120125d1111549b60f",
		Verified: SourceHash, Semantics: "redlock-rb-lock", Replies: "OK (status) locked or extended; nil otherwise",
		MinKeys: 1, MinArgs: 2, exec: execRedlockRbLock,
	},
	{
		ID: "redlock-rb/lock-1.x", Family: famRedlockRb, Op: "lock",
		Clients:  []Client{{"redlock-rb", "0.2.0–1.2.1"}},
		SHA1:     "a90bf4be8a6e440e3cc24540eb2f9ff1e16fbcc3",
		NormSHA1: "c9855e949e327b829040c8120125d1111549b60f",
		Verified: SourceHash, Semantics: "redlock-rb-lock", Replies: "OK (status) locked or extended; nil otherwise",
		MinKeys: 1, MinArgs: 2, exec: execRedlockRbLock,
	},
	{
		ID: "redlock-rb/unlock", Family: famRedlockRb, Op: "unlock",
		Clients:  []Client{{"redlock-rb", "1.2.2–2.0.6, 0.0.1–0.0.3"}},
		SHA1:     "8e4905cee18e7c3188d10f2b8b170e403baed34f",
		NormSHA1: "278b7fc39f087c6276c7b7c08962022c4fe73ba6",
		Verified: SourceHash, Semantics: "release", Replies: "1 deleted; 0 not held by token",
		MinKeys: 1, MinArgs: 1, exec: execRelease,
	},
	{
		ID: "redlock-rb/unlock-1.x", Family: famRedlockRb, Op: "unlock",
		Clients:  []Client{{"redlock-rb", "0.0.4–1.2.1"}},
		SHA1:     "963db4d9f0ccfdb859098be0b29f8b41dc02ed97",
		NormSHA1: "278b7fc39f087c6276c7b7c08962022c4fe73ba6",
		Verified: SourceHash, Semantics: "release", Replies: "1 deleted; 0 not held by token",
		MinKeys: 1, MinArgs: 1, exec: execRelease,
	},
	{
		ID: "redlock-rb/pttl", Family: famRedlockRb, Op: "pttl",
		Clients:  []Client{{"redlock-rb", "1.2.2–2.0.6"}},
		SHA1:     "78d2ca48a6dc9ef6892059792a3a0c5237733d64",
		NormSHA1: "c2a19a12724d3dfae84debbb04de53b5893ee6e9",
		Verified: SourceHash, Semantics: "get-and-pttl", Replies: "array [token or nil, PTTL in ms (-2 missing, -1 no TTL)]",
		MinKeys: 1, TTLReply: true, exec: execGetAndPTTL,
	},
	{
		ID: "redlock-rb/pttl-1.2.1", Family: famRedlockRb, Op: "pttl",
		Clients:  []Client{{"redlock-rb", "1.2.1"}},
		SHA1:     "cd1ae9bb543136ebc0a80a277cd59a7cec83b296",
		NormSHA1: "c2a19a12724d3dfae84debbb04de53b5893ee6e9",
		Verified: SourceHash, Semantics: "get-and-pttl", Replies: "array [token or nil, PTTL in ms (-2 missing, -1 no TTL)]",
		MinKeys: 1, TTLReply: true, exec: execGetAndPTTL,
	},

	// pottery Redlock (and AIORedlock): acquire is a plain SET NX PX.
	{
		ID: "pottery/acquired", Family: famPottery, Op: "acquired",
		Clients:  []Client{{"pottery", "v1.0.5–v3.0.1"}},
		SHA1:     "f5f7bd3a3aa4a63c507c1155c5ea1219b350d992",
		NormSHA1: "db8be0bce163fc8e866508abf6c3ecfafb858243",
		Verified: SourceHash, Semantics: "pttl-or-zero", Replies: "PTTL in ms if held by token and positive; 0",
		MinKeys: 1, MinArgs: 1, TTLReply: true, exec: execPTTLOrZero,
	},
	{
		ID: "pottery/extend", Family: famPottery, Op: "extend",
		Clients:  []Client{{"pottery", "v1.0.5–v3.0.1"}},
		SHA1:     "ba015a80261b616e7a62d35df0b8e3edbe6c9414",
		NormSHA1: "b6a7f39231070c58204ed334faf17d0771a644b5",
		Verified: SourceHash, Semantics: "extend", Replies: "1 extended; 0 not held by token",
		MinKeys: 1, MinArgs: 2, exec: execExtend,
	},
	{
		ID: "pottery/release", Family: famPottery, Op: "release",
		Clients:  []Client{{"pottery", "v1.0.5–v3.0.1"}},
		SHA1:     "a4aada0b36710970eedaaaeec4a6b7d8c78c4f80",
		NormSHA1: "ccfaa2106fdcf998df5cf31df79ab22b3e652ac4",
		Verified: SourceHash, Semantics: "release", Replies: "1 deleted; 0 not held by token",
		MinKeys: 1, MinArgs: 1, exec: execRelease,
	},
	{
		ID: "pottery/acquired-v1.0.0", Family: famPottery, Op: "acquired",
		Clients:  []Client{{"pottery", "v1.0.0–v1.0.4"}},
		SHA1:     "f458acd98fe495b8e4ff97c0f53f745f2c4aa252",
		NormSHA1: "db8be0bce163fc8e866508abf6c3ecfafb858243",
		Verified: SourceHash, Semantics: "pttl-or-zero", Replies: "PTTL in ms if held by token and positive; 0",
		MinKeys: 1, MinArgs: 1, TTLReply: true, exec: execPTTLOrZero,
	},
	{
		ID: "pottery/extend-v1.0.0", Family: famPottery, Op: "extend",
		Clients:  []Client{{"pottery", "v1.0.0–v1.0.4"}},
		SHA1:     "307044d49c8f033fbb885e9e0f1b7fe9e0e60675",
		NormSHA1: "b6a7f39231070c58204ed334faf17d0771a644b5",
		Verified: SourceHash, Semantics: "extend", Replies: "1 extended; 0 not held by token",
		MinKeys: 1, MinArgs: 2, exec: execExtend,
	},
	{
		ID: "pottery/release-v1.0.0", Family: famPottery, Op: "release",
		Clients:  []Client{{"pottery", "v1.0.0–v1.0.4"}},
		SHA1:     "d141b64a0a43e66a8576edaea6123638c0d74b31",
		NormSHA1: "ccfaa2106fdcf998df5cf31df79ab22b3e652ac4",
		Verified: SourceHash, Semantics: "release", Replies: "1 deleted; 0 not held by token",
		MinKeys: 1, MinArgs: 1, exec: execRelease,
	},
}
