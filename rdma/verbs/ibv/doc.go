// Package ibv is the project's only contact with libibverbs: open a device,
// register memory, create and connect reliable-connection queue pairs, post
// chains of work requests, and poll completions. It is a thin cgo layer over
// a C shim (shim.c) that passes plain values, so Go never depends on a
// libibverbs struct layout.
//
// The cgo half builds only with the verbs build tag (go build -tags verbs),
// and then needs libibverbs (Debian: libibverbs-dev) to build and the
// device's provider (ibverbs-providers) to run. Without the tag the package
// has its constants and Available = false, so that the default build needs
// no C library at all.
package ibv
