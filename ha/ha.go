// Package ha keeps a shard's control state in etcd, so that a standby memory
// node can take over a shard whose active node is lost (FaRM's split: a
// one-sided data path, and a coordination service that only agrees on who
// holds which role).
//
// etcd carries no lock traffic. Per shard it holds one record (Record): the
// address of the active memory node, its generation, the fencing high-water
// mark, the longest lease horizon it confirmed and its member list. Memory
// nodes campaign for the shard with etcd's concurrency.Election (Campaign);
// the winner starts a new generation from the record and keeps the record up
// to date through writes that succeed only while it still leads (Leader).
// Proxies read the record and watch it (Follow), and join whichever node it
// names.
//
// Why no two generations ever grant at once, and why fencing tokens only
// grow, is argued in docs/reliability.md ("Losing a memory node").
package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/memnode"
)

// Prefix is where every shard's keys live in etcd.
const Prefix = "/shiftlock/shards/"

// Record is a shard's control state, stored as JSON under RecordKey.
type Record struct {
	memnode.State
	// Active is the address proxies dial to reach the active memory node.
	Active string `json:"active"`
	// Node names the active memory node, for operators.
	Node string `json:"node"`
	// Members are the proxies that were members of the active node when
	// it last wrote the record (informational: a new generation admits
	// whoever joins once its grace is over).
	Members []Member `json:"members,omitempty"`
}

// Member is one proxy's membership in the active memory node.
type Member struct {
	Node uint16 `json:"node"`
	Addr string `json:"addr"`
}

// RecordKey is the key of shard's Record.
func RecordKey(shard string) string { return Prefix + shard + "/record" }

func electionPrefix(shard string) string { return Prefix + shard + "/election" }

// ValidShard reports whether name can name a shard: non-empty, and no '/'
// that would let one shard's keys nest inside another's.
func ValidShard(name string) error {
	if name == "" || strings.ContainsAny(name, "/ \t\n") {
		return fmt.Errorf("ha: bad shard name %q (non-empty, no '/' or spaces)", name)
	}
	return nil
}

// Dial connects to etcd. The client's own logging is kept to warnings.
func Dial(endpoints []string, log *zap.Logger) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("ha: no etcd endpoints")
	}
	if log == nil {
		log = zap.NewNop()
	}
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)),
	})
}

// Read returns shard's record; ok is false when no memory node has ever
// been active for it.
func Read(ctx context.Context, cli *clientv3.Client, shard string) (rec Record, ok bool, err error) {
	rec, ok, _, err = read(ctx, cli, shard)
	return rec, ok, err
}

func read(ctx context.Context, cli *clientv3.Client, shard string) (Record, bool, int64, error) {
	resp, err := cli.Get(ctx, RecordKey(shard))
	if err != nil {
		return Record{}, false, 0, fmt.Errorf("ha: reading shard %s: %w", shard, err)
	}
	if len(resp.Kvs) == 0 {
		return Record{}, false, resp.Header.Revision, nil
	}
	rec, err := decode(resp.Kvs[0].Value)
	if err != nil {
		return Record{}, false, 0, fmt.Errorf("ha: shard %s: %w", shard, err)
	}
	return rec, true, resp.Header.Revision, nil
}

func decode(raw []byte) (Record, error) {
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return Record{}, fmt.Errorf("corrupt record: %w", err)
	}
	return rec, nil
}
