package procutil

import "net"

// Loopback reports whether addr ("host:port") can be reached from this
// host only: its host is an IP literal in 127.0.0.0/8 or ::1, or
// "localhost". An empty host, 0.0.0.0 and :: mean every interface, and any
// other name may resolve to anything, so they all count as reachable from
// the network.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// FabricFix is how to fix a fabric port (a memory node's, or a proxy's peer
// port) that would be reachable from the network with no fabric secret,
// which the binaries refuse: without the secret, anyone who reaches such a
// port can read, free and forge every lock.
const FabricFix = "Create a secret (openssl rand -hex 32 > /etc/shiftlock/fabric.secret) and give the same file " +
	"to every memory node and proxy (fabric_secret_file, -fabric-secret-file); or keep the fabric on 127.0.0.1; " +
	"or, on a network you trust, say so with fabric_insecure: true (-fabric-insecure)"
