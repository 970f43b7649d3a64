package verbs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
)

// DeviceConfig names the RDMA device and port.
type DeviceConfig struct {
	// Device is the RDMA device (ibv_devices; "" for the first one).
	Device string
	// Port is its port (0 for 1).
	Port int
	// GID is the GID index to use, as a number; "" picks the port's first
	// IPv4-mapped RoCE v2 GID (what rxe and ConnectX have over IPv4).
	GID string
}

func (c DeviceConfig) gidIndex() (int, error) {
	if c.GID == "" {
		return -1, nil
	}
	n, err := strconv.Atoi(c.GID)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("verbs: GID index %q is not a number", c.GID)
	}
	return n, nil
}

// Config configures a member's endpoint.
type Config struct {
	DeviceConfig
	// Control configures the TCP control connection to the memory node
	// and the peer port (name, addresses, fabric secret, logger, default
	// timeout): they carry set-up, the control path (join, recovery,
	// probes) and nothing of a lock's fast path.
	Control tcpfab.Config
}

// ServerConfig configures the memory node's side.
type ServerConfig struct {
	DeviceConfig
	// LockTable is how the lock table is reached (default auto: CPU, on
	// every device here).
	LockTable LockTableMode
	// Credits is how many CPU requests each member may have in flight: the
	// receive buffers the memory node keeps posted for it (default 32).
	Credits int
	// RevokeEvery is how often the memory node looks for members it no
	// longer admits (declared dead, or left), whose queue pairs it takes
	// to the error state RevokeGrace after it first sees them so (default
	// 10 ms). CPU requests are checked one by one, as tcpfab checks its
	// frames, so a fenced member's CPU verbs fail as fenced at once.
	RevokeEvery time.Duration
	// RevokeGrace: with a CPU lock table, revocation protects nothing a
	// fenced member could harm (its one-sided words are its own node-table
	// slot and read-only era counters), so it waits a while (default 1 s),
	// during which the member reads its SlotDead status one-sided and
	// learns it was fenced, as on tcpfab, rather than only that its queue
	// pair broke. With a one-sided lock table it is 0: access ends at the
	// first look.
	RevokeGrace time.Duration
	Logger      *zap.Logger
}

// ErrNotBuilt is what every entry point returns in a build without the
// verbs tag.
var ErrNotBuilt = errors.New("verbs: this binary was built without RDMA support; rebuild it with -tags verbs, which needs libibverbs-dev (make build-verbs)")

// DeviceCounters reads an RDMA device's own counters, the ones `rdma
// statistic show` lists: /sys/class/infiniband/DEVICE/ports/PORT/hw_counters
// (port 0 reads port 1). soft-RoCE's include sent_pkts and rcvd_pkts, every
// packet it put on or took off the wire, acknowledgements included.
func DeviceCounters(device string, port int) (map[string]uint64, error) {
	if port <= 0 {
		port = 1
	}
	dir := fmt.Sprintf("/sys/class/infiniband/%s/ports/%d/hw_counters", device, port)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("verbs: device counters: %w", err)
	}
	out := map[string]uint64{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // some counters are write-only or vanish with the device
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			out[e.Name()] = v
		}
	}
	return out, nil
}
