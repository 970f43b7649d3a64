// Package tcpfab is the TCP soft-NIC: a memory node's regions and control
// path served over TCP (Server), and a node's rdma.Endpoint that reaches them
// (Dial). Verbs are pipelined over one connection per node and matched to
// replies by request id; the server answers everything already in its read
// buffer before it flushes, so throughput grows with the number of verbs in
// flight. A Batch is one frame and one round trip. Sends go directly between
// nodes over cached peer connections, never through the memory node.
//
// The wire format is specified in PROTOCOL.md. The server executes every
// verb through the host's rdma.Memory, so tcpfab and memfab cannot disagree
// about what a verb does; the conformance suite in rdma/fabrictest checks it.
package tcpfab
