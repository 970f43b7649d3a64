package main

import (
	"fmt"
	"syscall"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/resp"
)

// ownFDs is how many file descriptors the proxy needs besides one per
// client: Redis's 32 for what every process has open (standard streams, the
// runtime's poller, log and profile files), the metrics endpoint, the RESP
// server's own (resp.ReservedFDs), and per memory node its fabric
// connections, peer port and the other proxies' connections to it.
func (c config) ownFDs() int {
	n := 32
	if c.MetricsListen != "" {
		n += 1 + procutil.MetricsMaxConns
	}
	n += resp.ReservedFDs(resp.Config{Frontend: c.Frontend, EventLoops: c.EventLoops}, c.TLSListen != "")
	n += 16 * (len(c.Memnodes) + len(c.Shards))
	if len(c.Etcd) > 0 {
		n += 8
	}
	return n
}

// fitMaxClients lowers maxclients to what the file descriptor limit leaves
// once the proxy's own descriptors are counted, and says so, as Redis does:
// a client accepted past the limit would find no descriptor, and every
// accept would fail. (Go raised the soft limit to the hard one at start, so
// the soft limit is all there is.) It refuses a limit that leaves no room
// for any client.
func fitMaxClients(cfg *config, log *zap.Logger) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		log.Warn("cannot read the file descriptor limit; maxclients is not checked against it", zap.Error(err))
		return nil
	}
	own := cfg.ownFDs()
	need := uint64(cfg.MaxClients) + uint64(own)
	if rl.Cur >= need {
		return nil
	}
	if rl.Cur <= uint64(own) {
		return fmt.Errorf("the file descriptor limit (ulimit -n) is %d, and the proxy needs %d for itself: no room for clients; "+
			"raise it (ulimit -n, systemd LimitNOFILE=) to at least %d, or %d for maxclients %d", rl.Cur, own, own+1, need, cfg.MaxClients)
	}
	fit := int(rl.Cur) - own
	log.Warn("maxclients lowered to fit the file descriptor limit; to serve more clients, raise the limit (ulimit -n, systemd LimitNOFILE=)",
		zap.Int("requested", cfg.MaxClients), zap.Int("maxclients", fit), zap.Uint64("nofile", rl.Cur),
		zap.Int("reserved", own), zap.Uint64("nofile_needed", need))
	cfg.MaxClients = fit
	return nil
}
