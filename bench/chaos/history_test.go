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

func span(client, key string, l, r uint64, shared bool, fence uint64, sent, granted, released int) Op {
	o := op(client, key, shared, fence, sent, granted, released, 1000)
	o.Span, o.L, o.R = true, l, r
	return o
}

// TestSpanHistory: for range locks, only overlapping spans of one name
// conflict, and fences must order conflicting grants unit by unit.
func TestSpanHistory(t *testing.T) {
	ok := []Op{
		span("a", "r", 0, 100, true, 5, 0, 1, 10),
		span("b", "r", 50, 150, true, 6, 0, 2, 10),   // readers share
		span("c", "s", 0, 100, false, 1, 0, 2, 10),   // another name
		span("e", "r", 150, 300, false, 3, 0, 4, 10), // beside a and b: no conflict, any fence
		span("f", "r", 90, 95, false, 7, 0, 11, 20),  // after a and b: beats them
		span("g", "r", 400, 500, false, 1, 0, 12, 20),
	}
	if v := Check(ok); len(v) != 0 {
		t.Fatalf("clean span history flagged: %v", v)
	}
	cases := map[string][]Op{
		"overlapping writers": {
			span("a", "r", 0, 100, false, 1, 0, 1, 10),
			span("b", "r", 99, 200, false, 2, 0, 5, 12),
		},
		"writer inside readers": {
			span("a", "r", 0, 100, true, 1, 0, 1, 10),
			span("b", "r", 10, 11, false, 2, 0, 5, 12),
		},
		"fence below an earlier overlapping writer's": {
			span("a", "r", 0, 100, false, 5, 0, 1, 10),
			span("b", "r", 50, 60, true, 1, 0, 20, 30),
		},
		"fence below on one unit only": {
			span("a", "r", 0, 10, false, 9, 0, 1, 5),
			span("x", "r", 500, 600, false, 20, 0, 1, 5),
			span("b", "r", 9, 600, false, 10, 0, 6, 8), // beats a, not x
		},
	}
	for name, h := range cases {
		if v := Check(h); len(v) == 0 {
			t.Errorf("%s: not detected", name)
		} else {
			t.Logf("%s: %v", name, v[0])
		}
	}
	// Adjacent spans never conflict, whatever their fences.
	if v := Check([]Op{span("a", "r", 0, 100, false, 5, 0, 1, 10), span("b", "r", 100, 200, false, 3, 0, 2, 10)}); len(v) != 0 {
		t.Fatalf("adjacent spans flagged: %v", v)
	}
}
