package wire

import "testing"

// testMaxArgs is the server's limit on a command's arguments (resp.maxArgs).
const testMaxArgs = 1 << 16

// FuzzGuard: the framing guard never panics, and what it accepts in one
// piece it also accepts fed byte by byte (its state carries across reads).
func FuzzGuard(f *testing.F) {
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n"))
	f.Add([]byte("*3000000000\r\n$2\r\n-1\r0"))
	f.Add([]byte("*1\r\n$-1\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		whole := NewGuard(64, 1<<10, 1<<10).Feed(data)
		g := NewGuard(64, 1<<10, 1<<10)
		var bytewise error
		for i := range data {
			if bytewise = g.Feed(data[i : i+1]); bytewise != nil {
				break
			}
		}
		if (whole == nil) != (bytewise == nil) {
			t.Fatalf("whole: %v, byte by byte: %v", whole, bytewise)
		}
	})
}

func TestGuardRejectsHugeCounts(t *testing.T) {
	for _, bad := range []string{"*3000000000\r\n", "*2\r\n$99999999999\r\n", "*1\r\n+x\r\n", "*1\r\n$-1\r\n", "*1\r\n$3\r\nabc\r\n*x"} {
		if err := NewGuard(testMaxArgs, 1<<20, 1<<20).Feed([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	// "*0" and "*-5" are skipped, as Redis skips them.
	good := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\nPING\r\n\r\n*0\r\n*-5\r\n*1\r\n$4\r\nPING\r\n"
	if err := NewGuard(testMaxArgs, 1<<20, 1<<20).Feed([]byte(good)); err != nil {
		t.Errorf("rejected a valid stream: %v", err)
	}
}
