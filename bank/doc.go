// Package bank is SmallBank on Redis: accounts in a real redis-server, the
// six SmallBank transactions under two-phase locking, interchangeable
// lockers (RedLock through redsync; RedLock as the ShiftLock paper's
// artifact ran it, RedlockRSLocker; the same redsync code through
// shiftlock-proxy; the proxy's LOCK.ACQUIRE with fencing tokens; the native
// ShiftLock client; and no locks at all), and an audit that the money adds
// up after every run.
//
// Schema. Account i has two integer balances in cents, savings:<i> and
// checking:<i>. The key bank:accounts holds the number of accounts loaded.
//
// Locks. There is one lock per account, lock:acct:<i>, separate from the data
// keys, covering both of its balances. Every SmallBank transaction but two
// (DepositChecking, TransactSavings) touches both balances of an account or
// the same balance of two accounts, so a lock per balance key would double
// the lock operations of Balance, WriteCheck and Amalgamate to win
// concurrency only between a deposit and a savings transaction on the same
// account. Locks are taken in ascending account order (for the native
// locker: ascending lock-table entry, the order of the resources actually
// locked), all before the first read and released after the last write.
//
// Aborts. A transaction whose locks cannot be had within the locker's own
// bounds (redsync's 32 tries; the native locker's wait deadline) releases
// what it holds, counts an abort and is tried again with the same accounts
// and amount, up to RunConfig.Attempts times, then dropped. Its latency runs
// from the first attempt, so retries are not hidden from the CDF.
//
// Skew. Account numbers are drawn from internal/keydist and scrambled (a
// fixed bijection), so that the hottest accounts are spread over the
// account range instead of being 0, 1, 2...: with ascending lock order the
// latter would always take a transaction's hot lock first.
//
// Writes. By default a transaction reads its balances (MGET), computes the
// new ones, and writes them back absolutely in one MSET, as a 2PL
// application does when the locks make read-compute-write atomic. Without
// locks this loses updates, and the audit's money check catches it. With
// WritesIncr the writes are INCRBY deltas in one MULTI/EXEC: no update is
// lost, but a check made on a stale read lets a balance go negative, which
// the audit's second check catches.
//
// Fencing. With ExecOptions.Fence the reads and writes go through Lua
// scripts that check the locks' fencing tokens against a fence key per
// account (FenceKey), so that a transaction whose lock ran out and passed
// to a newer holder cannot write from its stale read; see fence.go.
package bank
