package resp

import (
	"testing"

	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
)

// BenchmarkSetRelease is the proxy's own work for one acquire-release cycle
// of the distinct-keys workload, without the network: parsing the commands'
// arguments, SET NX PX, EVALSHA of the compare-and-delete script, and the
// replies.
func BenchmarkSetRelease(b *testing.B) {
	s, _ := testServer(b, "")
	st := newConn(s)
	body := `if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end`
	sha := scripts.SHA1Hex(body)
	// As go-redis does after its first NOSCRIPT.
	s.exec(st, [][]byte{[]byte("script"), []byte("load"), []byte(body)})
	var keys [64][]byte
	for i := range keys {
		keys[i] = []byte("tput:" + string(rune('A'+i)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i%len(keys)]
		st.w.reset()
		s.exec(st, [][]byte{[]byte("set"), k, []byte("tok"), []byte("px"), []byte("10000"), []byte("nx")})
		if string(st.w.b) != "+OK\r\n" {
			b.Fatalf("SET: %q", st.w.b)
		}
		st.w.reset()
		s.exec(st, [][]byte{[]byte("evalsha"), []byte(sha), []byte("1"), k, []byte("tok")})
		if string(st.w.b) != ":1\r\n" {
			b.Fatalf("EVALSHA: %q", st.w.b)
		}
	}
}
