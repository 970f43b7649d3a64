package chaos

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func op(client, key string, shared bool, fence uint64, sent, granted, released int, ttl int) Op {
	return Op{Client: client, Key: key, Shared: shared, Fence: fence, Sent: at(sent), Granted: at(granted),
		Released: at(released), TTL: time.Duration(ttl) * time.Millisecond}
}

func TestCleanHistory(t *testing.T) {
	h := []Op{
		op("a", "k", false, 1, 0, 1, 10, 1000),
		op("b", "k", true, 2, 5, 11, 20, 1000),
		op("c", "k", true, 2, 5, 12, 25, 1000), // readers of one phase may share a fence
		op("d", "k", false, 5, 8, 26, 30, 1000),
		op("e", "other", false, 1, 0, 2, 28, 1000), // another key overlaps freely
		// A holder whose TTL ran out (counted from its request) before the
		// next one was granted: no overlap, even though it released late.
		op("f", "k", false, 6, 30, 31, 900, 100),
		op("g", "k", false, 7, 140, 140, 150, 1000),
	}
	if v := Check(h); len(v) != 0 {
		t.Fatalf("clean history flagged: %v", v)
	}
}

// TestPlantedDoubleGrant: the checker must catch two writers at once, a
// reader beside a writer, and fences that go backwards.
func TestPlantedDoubleGrant(t *testing.T) {
	cases := map[string][]Op{
		"two writers": {
			op("a", "k", false, 1, 0, 1, 10, 1000),
			op("b", "k", false, 2, 0, 5, 12, 1000),
		},
		"reader beside writer": {
			op("a", "k", true, 1, 0, 1, 10, 1000),
			op("b", "k", false, 2, 0, 9, 12, 1000),
		},
		"fence not increasing": {
			op("a", "k", false, 7, 0, 1, 10, 1000),
			op("b", "k", false, 7, 0, 11, 12, 1000),
		},
		"reader fence below a finished writer's": {
			op("a", "k", false, 9, 0, 1, 10, 1000),
			op("b", "k", true, 3, 0, 11, 12, 1000),
		},
	}
	for name, h := range cases {
		if v := Check(h); len(v) == 0 {
			t.Errorf("%s: not detected", name)
		} else {
			t.Logf("%s: %v", name, v[0])
		}
	}
}
