package bank

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Fencing. A lock with a TTL can run out while its holder still works: a
// pause, a slow network, or a TTL shorter than the transaction. The next
// holder then reads and writes the same balances, and whichever writes last
// wins with a value computed from a stale read: money is created or lost.
// RedLock cannot prevent that; a fencing token can, if the data store
// checks it (Kleppmann, "How to do distributed locking", 2016).
//
// With fencing on, every account has a fence key, fence:<id>, in the data
// redis-server, holding the newest token that has touched the account.
// A transaction reads and writes through two Lua scripts, each atomic in
// Redis:
//
//   - the read checks, for each account, that its token is not older than
//     the fence and raises the fence to it; an exclusive holder whose token
//     is older has lost its lock to a newer holder and aborts;
//   - the write checks the fences again and writes only if none has moved
//     past its token: if a newer holder has read the account meanwhile, this
//     transaction's view is stale and its write would undo the newer one's.
//
// Checking at the read as well as at the write is what makes it safe: a
// stale holder that writes between a newer holder's read and write would
// otherwise pass the write check, and the newer holder, writing last with
// the older read, would undo it.
//
// A shared (read-only) holder raises the fence but is never refused: it
// writes nothing, so a stale view costs nothing but its own answer.

// FenceKey names account id's fence.
func FenceKey(id uint64) string { return "fence:" + strconv.FormatUint(id, 10) }

// Fenced is a Held whose locks carry fencing tokens: tokens that strictly
// increase, per lock, from one exclusive grant to the next.
type Fenced interface {
	Held
	// Fence is the token of the lock on key (a LockReq's Key).
	Fence(key string) (uint64, bool)
}

// ErrFenced: the transaction's lock had run out and a newer holder had
// touched an account, so the data store refused this one. Nothing was
// written; the transaction aborts and may be tried again.
var ErrFenced = errors.New("bank: fenced out (the lock ran out and a newer holder took the account)")

// Tokens go to Lua as fixed-width decimal strings, so that string order is
// number order for every uint64 (Lua's numbers are doubles).
func fenceArg(tok uint64) string { return fmt.Sprintf("%020d", tok) }

// fencedRead: KEYS are n fence keys, then the data keys to read; ARGV are n,
// the n tokens, and "x" (exclusive) or "s" (shared).
var fencedRead = redis.NewScript(`
local n = tonumber(ARGV[1])
local shared = ARGV[n + 2] == 's'
for i = 1, n do
  local f = redis.call('GET', KEYS[i])
  if f and f > ARGV[i + 1] then
    if not shared then
      return redis.error_reply('FENCED ' .. KEYS[i] .. ' is at ' .. f .. ', token ' .. ARGV[i + 1])
    end
  else
    redis.call('SET', KEYS[i], ARGV[i + 1])
  end
end
return redis.call('MGET', unpack(KEYS, n + 1))
`)

// fencedWrite: KEYS are n fence keys, then the data keys to write; ARGV are
// n, the n tokens, "set" or "incr", then one value (or delta) per data key.
// It returns each data key's balance after the write.
var fencedWrite = redis.NewScript(`
local n = tonumber(ARGV[1])
for i = 1, n do
  local f = redis.call('GET', KEYS[i])
  if f and f > ARGV[i + 1] then
    return redis.error_reply('FENCED ' .. KEYS[i] .. ' is at ' .. f .. ', token ' .. ARGV[i + 1])
  end
end
local incr = ARGV[n + 2] == 'incr'
local after = {}
for j = n + 1, #KEYS do
  if incr then
    after[#after + 1] = redis.call('INCRBY', KEYS[j], ARGV[j + 2])
  else
    redis.call('SET', KEYS[j], ARGV[j + 2])
    after[#after + 1] = tonumber(ARGV[j + 2])
  end
end
return after
`)

// fences are a transaction's fence keys and tokens, as script arguments.
type fences struct {
	keys []string
	args []any // n, tokens...
}

func txnFences(t Txn, h Fenced) (fences, error) {
	ids := []uint64{t.A}
	if t.Type.Accounts() == 2 {
		ids = append(ids, t.B)
	}
	f := fences{args: []any{len(ids)}}
	for _, id := range ids {
		tok, ok := h.Fence(LockKey(id))
		if !ok {
			return fences{}, fmt.Errorf("bank: no fencing token for %s", LockKey(id))
		}
		f.keys = append(f.keys, FenceKey(id))
		f.args = append(f.args, fenceArg(tok))
	}
	return f, nil
}

func fencedErr(err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "FENCED") {
		return fmt.Errorf("%w: %v", ErrFenced, err)
	}
	return err
}

// applyFenced is apply with every read and write checked against the
// fences.
func applyFenced(ctx context.Context, rdb *redis.Client, t Txn, w WriteMode, h Fenced, hold func()) (Outcome, error) {
	f, err := txnFences(t, h)
	if err != nil {
		return Outcome{}, err
	}
	keys := t.Keys()
	mode := "x"
	if t.Type.ReadOnly() {
		mode = "s"
	}
	raw, err := fencedRead.Run(ctx, rdb, append(append([]string(nil), f.keys...), keys...), append(append([]any(nil), f.args...), mode)...).Slice()
	if err != nil {
		return Outcome{}, fmt.Errorf("bank: fenced read %v: %w", keys, fencedErr(err))
	}
	vals, o, err := compute(t, keys, raw, hold)
	if err != nil {
		return Outcome{}, err
	}
	wkeys := append([]string(nil), f.keys...)
	wargs := append(append([]any(nil), f.args...), w.String())
	for i, ch := range o.Changed {
		if ch {
			wkeys = append(wkeys, keys[i])
			if w == WritesSet {
				wargs = append(wargs, o.New[i])
			} else {
				wargs = append(wargs, o.New[i]-vals[i])
			}
		}
	}
	if len(wkeys) == len(f.keys) {
		return o, nil
	}
	after, err := fencedWrite.Run(ctx, rdb, wkeys, wargs...).Int64Slice()
	if err != nil {
		if err = fencedErr(err); errors.Is(err, ErrFenced) {
			// The script refused before writing anything.
			return o, err
		}
		return o, fmt.Errorf("%w: %v", ErrWrite, err)
	}
	o.Overdrawn = overdrawn(wkeys[len(f.keys):], after)
	return o, nil
}
