// Package verbs is the fabric on real RDMA verbs: an rdma.Endpoint over
// libibverbs reliable-connection queue pairs (Dial, for a proxy), and the
// memory node's side (Server). It is the fourth fabric, next to memfab
// (in-process), tcpfab (a TCP soft-NIC) and latfab (a model), and passes
// the same conformance suite (rdma/fabrictest), which make test-verbs runs
// against the Linux kernel's soft-RoCE (rdma_rxe) in a qemu guest.
//
// The cgo half builds only with the verbs build tag (go build -tags verbs
// ./cmd/...), so the default build needs no C library; without the tag,
// NewServer and Join fail with ErrNotBuilt. The messages (wire.go) and the
// region plan (policy.go) are plain Go and are tested and fuzzed in every
// build.
//
// # Extended atomics
//
// ShiftLock's lock entry, MCS and the range trees use 16-byte masked CAS
// and FAA (ShiftLock §3.2: EXTCAS and EXTFAA on mlx5). Standard
// libibverbs has no such verb and soft-RoCE has no such operation, so on
// such a device (LockTableCPU, the default) every verb on a lock-table or
// range-tree word is executed by the memory node's CPU, requested with a
// SEND and answered with one: one round trip, as a one-sided atomic is,
// plus the memory node's CPU. Every access to those words goes that way,
// reads included, so that a 16-byte entry is never seen torn and an atomic
// is never interleaved with another mechanism's; the regions are not even
// registered for remote access. The node table and the era counters stay
// one-sided. docs/shiftlock.md ("The verbs fabric") has the accounting, and
// what a ConnectX user would need for one-sided extended atomics, which no
// code here implements.
package verbs
