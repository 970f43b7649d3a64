//go:build !verbs

package ibv

// Available reports whether this build can reach RDMA devices at all: not
// without the verbs build tag.
const Available = false
