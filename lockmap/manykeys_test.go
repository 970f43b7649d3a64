package lockmap_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/lockmap/maptest"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestAcquireManyKeysSharingEntries: an acquire of more keys than a scan
// serves (grantIndex, the fence map) still takes each lock entry once for
// the keys that share it, answers each key's fence in the keys' order,
// skips a repeated key, and holds every key until its release.
func TestAcquireManyKeysSharingEntries(t *testing.T) {
	m, _ := maptest.Embedded(t, memnode.Config{Entries: 32, DeadAfter: time.Hour}, lockmap.Config{})
	ctx := context.Background()
	var keys []string
	for i := 0; i < 60; i++ { // 60 keys on 32 entries: many share one
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	keys = append(keys, "k7") // repeated
	fences, ok, err := m.Acquire(ctx, keys, "tok", lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: time.Minute})
	if !ok || err != nil || len(fences) != len(keys) {
		t.Fatalf("acquire of %d keys: %v %v, %d fences", len(keys), ok, err, len(fences))
	}
	byEntry := map[uint64]uint64{}
	for i, k := range keys {
		in, err := m.Lookup(ctx, k)
		if err != nil || in.State != lockmap.HeldHere || len(in.Holders) != 1 {
			t.Fatalf("%s after the acquire: %+v %v", k, in, err)
		}
		if f := in.Holders[0].Fence; f != fences[i] || f == 0 {
			t.Fatalf("%s: fence %d answered, %d held", k, fences[i], f)
		}
		if f, seen := byEntry[in.Entry]; seen && f != fences[i] {
			t.Fatalf("%s shares entry %d but has fence %d, not %d", k, in.Entry, fences[i], f)
		}
		byEntry[in.Entry] = fences[i]
	}
	if len(byEntry) >= 60 {
		t.Fatalf("60 keys on %d entries: none shared one, the test proves nothing", len(byEntry))
	}
	for _, k := range keys[:60] {
		if !m.Release(k, "tok") {
			t.Fatalf("release of %s", k)
		}
	}
	for _, k := range keys {
		if in, _ := m.Lookup(ctx, k); in.State != lockmap.Free {
			t.Fatalf("%s after the releases: %+v", k, in)
		}
	}
}
