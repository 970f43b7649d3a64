package lockmap

import "testing"

// The entry table's two counts move together on a release (excl down,
// releasing up, in one visit), stay apart per membership, and a zero entry
// reads as an absent one. forgetExcl (Replace) drops a membership's
// exclusive counts but not its releases in flight, which still land and
// count themselves out. A shard keeps at most idleKeep zero entries.
func TestEntryTable(t *testing.T) {
	var tab entryTable
	a, b := &Domain{id: 1}, &Domain{id: 2}
	const e = 3

	tab.add(a, e, 1, 0) // granted
	if c := tab.get(a, e); c != (entryCounts{excl: 1}) {
		t.Fatalf("after a grant: %+v", c)
	}
	if c := tab.get(b, e); c != (entryCounts{}) {
		t.Fatalf("another membership's entry reads %+v", c)
	}
	tab.add(a, e, -1, 1) // its last reference dropped, the release posted
	if c := tab.get(a, e); c != (entryCounts{releasing: 1}) {
		t.Fatalf("during the release: %+v", c)
	}
	tab.add(a, e, 0, -1) // landed
	if c := tab.get(a, e); c != (entryCounts{}) {
		t.Fatalf("after the release: %+v", c)
	}
	tab.add(a, e, -1, -1) // an extra decrement (a count forgotten meanwhile) stays at zero
	if c := tab.get(a, e); c != (entryCounts{}) {
		t.Fatalf("below zero: %+v", c)
	}

	tab.add(a, e, 1, 0)
	tab.add(a, e+16, 1, 1)
	tab.add(b, e, 1, 0)
	tab.forgetExcl(a)
	if c := tab.get(a, e); c != (entryCounts{}) {
		t.Fatalf("a forgotten membership's grant reads %+v", c)
	}
	if c := tab.get(a, e+16); c != (entryCounts{releasing: 1}) {
		t.Fatalf("a forgotten membership's release in flight reads %+v", c)
	}
	if c := tab.get(b, e); c != (entryCounts{excl: 1}) {
		t.Fatalf("forgetting one membership changed another's: %+v", c)
	}

	shards := uint64(len(tab.shards))
	for i := uint64(0); i < 100; i++ {
		tab.add(a, e+i*shards, 1, 0)
		tab.add(a, e+i*shards, -1, 1)
		tab.add(a, e+i*shards, 0, -1)
	}
	s := &tab.shards[e%shards]
	zeros := 0
	for _, c := range s.n {
		if c == (entryCounts{}) {
			zeros++
		}
	}
	if zeros > idleKeep {
		t.Fatalf("a shard kept %d zero entries, more than %d", zeros, idleKeep)
	}
}
