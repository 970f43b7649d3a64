package itest

import (
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// pyLock exercises redis-py's redis.lock.Lock (Debian's python3-redis) and
// prints what every call returned, as JSON.
const pyLock = `
import json, sys, time, threading
import redis
port = int(sys.argv[1])
r = redis.Redis(host="127.0.0.1", port=port)
out = {"version": redis.__version__}
a = r.lock("py:res", timeout=5)
out["acquire"] = a.acquire(blocking=False)
out["locked"] = a.locked()
out["owned"] = a.owned()
b = r.lock("py:res", timeout=5)
out["other_nonblocking"] = b.acquire(blocking=False)
out["other_owned"] = b.owned()
out["extend"] = a.extend(5)
out["pttl_after_extend"] = r.pttl("py:res")
out["reacquire"] = a.reacquire()
a.release()
out["locked_after_release"] = a.locked()
# A holder whose TTL ran out, and whose lock someone else took, is told by
# the server's release script that it no longer owns it.
c = r.lock("py:x", timeout=0.3)
c.acquire()
time.sleep(0.5)
d = r.lock("py:x", timeout=5)
out["taker_acquire"] = d.acquire(blocking=False)
try:
    c.release()
    out["stale_release"] = "no error"
except redis.exceptions.LockNotOwnedError:
    out["stale_release"] = "LockNotOwnedError"
out["taker_owned"] = d.owned()
d.release()
# Blocking acquire that waits for a holder to let go.
h = r.lock("py:wait", timeout=5, thread_local=False)
h.acquire()
def later():
    time.sleep(0.2)
    h.release()
t0 = time.time()
threading.Thread(target=later).start()
w = r.lock("py:wait", timeout=5, blocking_timeout=5)
out["blocking_acquire"] = w.acquire()
out["blocking_waited_ms"] = int((time.time() - t0) * 1000)
w.release()
# Expiry: a lock with a short timeout is gone after it.
e = r.lock("py:exp", timeout=0.3)
e.acquire()
time.sleep(0.6)
out["expired_locked"] = e.locked()
with r.lock("py:ctx", timeout=2) as l:
    out["context_manager_owned"] = l.owned()
print(json.dumps(out))
`

func TestRedisPyLock(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import redis.lock").Run(); err != nil {
		t.Fatal("python3-redis missing (make test installs it: scripts/install-deps.sh)")
	}
	p := testproc.Proxy(t)
	_, port, _ := splitHostPort(p.Addr)
	ctx := ctxT(t, time.Minute)
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", pyLock, port).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python output %q: %v", out, err)
	}
	t.Logf("redis-py %v", got["version"])
	want := map[string]any{
		"acquire": true, "locked": true, "owned": true,
		"other_nonblocking": false, "other_owned": false,
		"extend": true, "reacquire": true, "locked_after_release": false,
		"taker_acquire": true, "stale_release": "LockNotOwnedError", "taker_owned": true,
		"blocking_acquire": true, "expired_locked": false, "context_manager_owned": true,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if ms, _ := got["pttl_after_extend"].(float64); ms <= 5000 || ms > 10000 {
		t.Errorf("PTTL after extend(5) of a 5 s lock = %v, want within (5000, 10000]", got["pttl_after_extend"])
	}
	if ms, _ := got["blocking_waited_ms"].(float64); ms < 190 {
		t.Errorf("blocking acquire returned after %v ms, before the holder released", ms)
	}
}
