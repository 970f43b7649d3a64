package tcpfab

import (
	"reflect"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// TestJoinReplyCarriesEveryLayoutField fills every field of rdma.Layout with
// a non-zero value and round-trips it: a field added to Layout but not to the
// wire format fails here instead of arriving as zero on the other side.
func TestJoinReplyCarriesEveryLayoutField(t *testing.T) {
	var l rdma.Layout
	v := reflect.ValueOf(&l).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Uint64, reflect.Uint32, reflect.Uint16:
			f.SetUint(uint64(1000 + i))
		case reflect.Int64:
			f.SetInt(int64(time.Duration(1000+i) * time.Millisecond))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]rdma.RegionInfo{{ID: 1, Name: "locks", Size: 4096}}))
		default:
			t.Fatalf("Layout.%s has kind %v: teach this test (and the codec) about it", v.Type().Field(i).Name, f.Kind())
		}
	}
	in := rdma.JoinReply{Node: 7, Layout: l, Peers: []rdma.Peer{{Node: 7, Addr: "127.0.0.1:1"}}}
	out, err := decodeJoinReply(appendJoinReply(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip lost something:\n in  %+v\n out %+v", in, out)
	}
}
