// Package verbsproc joins client nodes to a memnode process over RDMA queue
// pairs (rdma/verbs) on the test device, for the tests that run ShiftLock
// and the baselines on a real verbs stack (make test-verbs). It builds only
// with the verbs tag. It is a package of its own, not part of testproc,
// because tcpfab's own tests use testproc and rdma/verbs imports tcpfab.
package verbsproc
