// Package baseline holds the locks ShiftLock is measured against (ShiftLock
// §4.1, Table 1): a CAS spin lock with and without SMART's backoff, DSLR's
// fetch-and-add bakery lock, and an MCS queue lock with handover by Send.
//
// Each one implements shiftlock.Locker on an rdma.Endpoint and uses the same
// lock table as ShiftLock (rdma.RegionLocks, 16-byte entries), so one
// benchmark and one checker (shiftlock/locktest) drive all of them on the
// same fabric. The exclusive-only locks (CAS, MCS) take readers as writers,
// as the paper's evaluation did. None of them has fencing tokens: Token is 0
// and checkers set NoTokens.
//
// Where the source algorithms leave a choice, the choice and its reason are
// in the doc comment of the lock and in docs/benchmarks/micro.md.
package baseline
