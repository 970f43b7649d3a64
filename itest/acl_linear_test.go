package itest

import (
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestACLPatternCostIsLinear (issue 32, item 8): a user whose pattern has
// several stars sends a key built to make a backtracking matcher try every
// way of placing them. A 60,000-byte key against "app:*:*:*:lock" is
// 3.6e13 placements: a backtracking matcher spins for days on the loop that
// serves everybody. Matching in time linear in the key (times the pattern)
// answers NOPERM at once, and other clients never notice. The deadlines
// below are liveness bounds, thousands of times what the work takes.
func TestACLPatternCostIsLinear(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		cfg := tempFile(t, "proxy.yaml", `requirepass: "adminpw"
users:
  - {name: app, password: "apppw", keys: ["app:*:*:*:lock", "b[0-9]?:*\\*"]}
`)
		p := testproc.Proxy(t, "-config", cfg, "-frontend", fe)
		admin := dialRaw(t, p.Addr)
		if got := admin.do("AUTH", "adminpw"); got != "+OK" {
			t.Fatalf("admin AUTH = %q", got)
		}
		app := dialRaw(t, p.Addr)
		if got := app.do("AUTH", "app", "apppw"); got != "+OK" {
			t.Fatalf("app AUTH = %q", got)
		}
		// The semantics stay Redis's glob: a key the pattern covers, one
		// it does not, an escaped star and a class.
		for key, want := range map[string]string{
			"app:a:b:c:lock":  "$-1",
			"app:a:b:lock":    "-NOPERM",
			"app:::::lock":    "$-1",
			"b7x:zz*":         "$-1",
			"b7x:zz":          "-NOPERM",
			"bx7:zz*":         "-NOPERM",
			"app:a:b:c:lockx": "-NOPERM",
		} {
			if got := app.do("GET", key); !strings.HasPrefix(got, want) {
				t.Fatalf("GET %q as app = %q, want %s", key, got, want)
			}
		}

		bomb := "app:" + strings.Repeat(":", 60000)
		start := time.Now()
		if err := app.write(respCmd("GET", bomb)); err != nil {
			t.Fatal(err)
		}
		if got := admin.do("PING"); got != "+PONG" {
			t.Fatalf("another client's PING while the pattern is matched = %q", got)
		}
		_ = app.c.SetReadDeadline(time.Now().Add(60 * time.Second))
		line, err := app.r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "-NOPERM") {
			t.Fatalf("GET of the backtracking bomb = %q, %v after %v; want NOPERM", line, err, time.Since(start))
		}
		if got := admin.do("SET", "app:1:2:3:lock", "t", "NX", "PX", "60000"); got != "+OK" {
			t.Fatalf("the proxy after the bomb: %q", got)
		}
	})
}
