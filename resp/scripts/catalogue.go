package scripts

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

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
	// Patient marks the families that bound every try of an acquire by a
	// deadline of their own, longer than the proxy's default wait budget:
	// redsync gives each try 5% of the expiry, against a budget of 4% of
	// the TTL. A connection that runs such a script belongs to a client
	// whose retries may wait the whole budget (lockmap.Habit).
	Patient bool

	exec func(ops Ops, keys, argv []string) wire.Reply
}

// Exec runs the script natively against ops. Argument errors and lock-table
// errors come back as Redis-style error replies, never as panics.
func (s *Script) Exec(ops Ops, keys, argv []string) wire.Reply {
	if len(keys) < s.MinKeys || len(argv) < s.MinArgs {
		return wire.Error(fmt.Sprintf(
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
			panic("scripts: duplicate script SHA1 " + s.SHA1)
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

// LookupLowerSHA is LookupSHA for a name already in lower case, as bytes:
// EVALSHA's argument, looked up on every call without making a string of
// it (a map index by string(b) does not copy).
func LookupLowerSHA(sha []byte) (*Script, bool) {
	s, ok := bySHA[string(sha)]
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
func UnsupportedScriptError(sha string) wire.Reply {
	return wire.Error(fmt.Sprintf("ERR this is a lock proxy; unsupported script (sha %s). Supported: %s. See docs/compatibility.md",
		strings.ToLower(sha), strings.Join(Supported(), ", ")))
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
		MinKeys: 1, MinArgs: 1, Patient: true, exec: execRelease,
	},
	{
		ID: "redsync/delete", Family: famRedsync, Op: "delete",
		Clients:  []Client{{"go-redsync/redsync", "v4.12.0–v4.18.1"}},
		SHA1:     "e950836ed1e694540c503ef9972b8de518044d3b",
		NormSHA1: "7993caa3740134efbd5ac97c8695f767f80951db",
		Verified: RealClient, Semantics: "release-tristate", Replies: "1 deleted; 0 held by another token; -1 missing",
		MinKeys: 1, MinArgs: 1, Patient: true, exec: execReleaseTristate,
	},
	{
		ID: "redsync/touch", Family: famRedsync, Op: "touch",
		Clients:  []Client{{"go-redsync/redsync", "v4.0.0–v4.18.1"}},
		SHA1:     "d75bb8b5bd13532ddedd17762e772346e39b321e",
		NormSHA1: "eab2bb9c2bd5ff466b3bf28d23e0a6be0b63e807",
		Verified: RealClient, Semantics: "extend", Replies: "1 extended; 0 not held by token",
		MinKeys: 1, MinArgs: 2, Patient: true, exec: execExtend,
	},
	{
		ID: "redsync/touch-setnx", Family: famRedsync, Op: "touch-or-acquire",
		Clients:  []Client{{"go-redsync/redsync", "v4.12.0–v4.18.1 (WithSetNXOnExtend)"}},
		SHA1:     "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79",
		NormSHA1: "093198007cadcfa2b840a96c0c99c7729de3bfa0",
		Verified: RealClient, Semantics: "extend-or-acquire", Replies: "1 extended or acquired; 0 held by another token",
		MinKeys: 1, MinArgs: 2, Patient: true, exec: execExtendOrAcquire,
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
