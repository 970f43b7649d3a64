// Package scripts runs the Lua lock scripts of the Redis lock clients
// natively: the catalogue of the exact bodies the clients send (by SHA1,
// and by a normalised form that survives re-indentation), and for each a Go
// executor that does what the script does in Redis. Its boundary is Ops,
// the operations a script may perform on the lock table; the RESP server
// implements Ops for one connection, so this package knows nothing of
// connections, and a test can run every executor on an in-memory table
// (scripttest). Replies are wire.Reply values, encoded by package wire.
package scripts

import "time"

// Ops is what the recognised lock scripts need from the lock table.
// Keys name locks; values are the holders' tokens.
//
// The executors never hold state of their own: every decision a script
// makes in Redis is a call here, so the lock table alone decides who holds
// what. A script that needs several calls is not atomic as a whole (unlike
// Lua in Redis); each executor is written so that a concurrent change between
// two calls yields an answer Redis could also have given for some ordering,
// and the calls that change state (Acquire, Release, Extend) re-check the
// token themselves.
type Ops interface {
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
