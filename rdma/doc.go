// Package rdma is the verbs layer: the one API that lock algorithms use to
// reach a memory node, whatever carries the bytes.
//
// It mirrors RDMA verbs closely enough that a hardware backend (libibverbs
// with DC transport and mlx5 extended atomics) can be added without touching
// the callers:
//
//   - one-sided verbs on a memory node's registered regions: Read, Write, CAS
//     and FAA on 8 bytes, and the extended atomics MaskedCAS and MaskedFAA on
//     8 or 16 bytes (see ApplyMaskedCAS and ApplyMaskedFAA for the exact
//     semantics, and U128 for the bit numbering every mask uses);
//   - Batch, to post several verbs with one doorbell and one round trip;
//   - connectionless two-sided Send to (NodeID, Target), received locally
//     through a handler (Inbox routes per Target), never a blocking RPC;
//   - Counters per node, verb kind and direction, exported by Collector.
//
// The fabrics live in sub-packages: memfab (in-process) and tcpfab (a TCP
// soft-NIC served by cmd/memnode). Field is the only place where lock-entry
// bit layouts are built.
package rdma
