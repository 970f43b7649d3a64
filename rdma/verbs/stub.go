//go:build !verbs

package verbs

import (
	"context"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
)

// Built reports whether this binary can reach RDMA devices: not without
// the verbs build tag.
const Built = false

// Server stands in for the memory node's side in a build without RDMA
// support: NewServer refuses, so none exists.
type Server struct{}

// NewServer fails with ErrNotBuilt.
func NewServer(ServerConfig) (*Server, error) { return nil, ErrNotBuilt }

func (*Server) Alloc(rdma.RegionID, uint64) []uint64  { panic(ErrNotBuilt) }
func (*Server) Host(h rdma.Host) rdma.Host            { return h }
func (*Server) Serve(rdma.Host, *tcpfab.Server) error { return ErrNotBuilt }
func (*Server) Close()                                {}

// Join fails with ErrNotBuilt.
func Join(context.Context, string, Config) (rdma.Endpoint, error) { return nil, ErrNotBuilt }
