package procutil

import "testing"

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7300": true,
		"127.3.2.1:0":    true,
		"[::1]:7300":     true,
		"localhost:7300": true,
		"0.0.0.0:7300":   false,
		"[::]:7300":      false,
		":7300":          false,
		"10.0.0.5:7300":  false,
		"lockserver:80":  false,
		"127.0.0.1":      false, // no port: not an address a listener takes
		"":               false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
