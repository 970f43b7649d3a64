package bank

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// LoadConfig says what to load.
type LoadConfig struct {
	Accounts uint64
	Seed     uint64
	// Batch accounts go in one MSET; Pipelines MSETs are in flight at once.
	Batch, Pipelines int
	// Progress, if set, is called after every batch with the accounts
	// loaded so far (from several goroutines, never concurrently).
	Progress func(done, total uint64)
}

// Load writes every account's opening balances and names (NamesKey), then the account count,
// so that a bank interrupted while loading is not taken for a loaded one.
// It returns the bank's total money.
func Load(ctx context.Context, rdb *redis.Client, cfg LoadConfig) (total int64, err error) {
	if cfg.Accounts == 0 {
		return 0, fmt.Errorf("bank: nothing to load (0 accounts)")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.Pipelines <= 0 {
		cfg.Pipelines = 4
	}
	if err := rdb.Del(ctx, MetaKey, NamesKey).Err(); err != nil {
		return 0, fmt.Errorf("bank: load: %w", err)
	}
	var sum, done atomic.Int64
	progress := make(chan struct{}, 1)
	progress <- struct{}{}
	err = parallel(ctx, cfg.Pipelines, cfg.Accounts, uint64(cfg.Batch), func(ctx context.Context, lo, hi uint64) error {
		args := make([]any, 0, 4*(hi-lo))
		var s int64
		for id := lo; id < hi; id++ {
			sv, ck := InitialBalances(cfg.Seed, id)
			s += sv + ck
			args = append(args, SavingsKey(id), strconv.FormatInt(sv, 10), CheckingKey(id), strconv.FormatInt(ck, 10))
		}
		names := make([]redis.Z, 0, hi-lo)
		for id := lo; id < hi; id++ {
			names = append(names, redis.Z{Score: float64(id), Member: AccountName(id)})
		}
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.MSet(ctx, args...)
			p.ZAdd(ctx, NamesKey, names...)
			return nil
		})
		if err != nil {
			return fmt.Errorf("bank: load accounts %d-%d: %w", lo, hi-1, err)
		}
		sum.Add(s)
		d := done.Add(int64(hi - lo))
		if cfg.Progress != nil {
			<-progress
			cfg.Progress(uint64(d), cfg.Accounts)
			progress <- struct{}{}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := rdb.Set(ctx, MetaKey, cfg.Accounts, 0).Err(); err != nil {
		return 0, fmt.Errorf("bank: load: %w", err)
	}
	return sum.Load(), nil
}

// Loaded returns the number of accounts the last complete load wrote, or 0
// if there is none.
func Loaded(ctx context.Context, rdb *redis.Client) (uint64, error) {
	s, err := rdb.Get(ctx, MetaKey).Result()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(s, 10, 64)
}
