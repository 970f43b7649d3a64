package bank_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/bank"
	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestRunMeasuresCPU: a run reports the CPU of the bank process and of
// every server it is given, per committed transaction and summed by role,
// and survives the JSON and CSV round trips; a process it cannot read is
// named, not silently counted as free.
func TestRunMeasuresCPU(t *testing.T) {
	dataSrv, lockSrv := testproc.Redis(t), testproc.Redis(t)
	data := redis.NewClient(&redis.Options{Addr: dataSrv.Addr, PoolSize: 16})
	defer data.Close()
	ctx := context.Background()
	const accounts = 1000
	if _, err := bank.Load(ctx, data, bank.LoadConfig{Accounts: accounts, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	l, servers, err := bank.OpenLocker(ctx, bank.LockerConfig{Name: "redlock", LockRedis: []string{lockSrv.Addr}, PoolSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dist, err := keydist.Parse("uniform", accounts)
	if err != nil {
		t.Fatal(err)
	}
	const gone = 1 << 30 // above any pid_max
	res, err := bank.Run(ctx, bank.RunConfig{Data: data, Locker: l, Servers: servers, Mix: bank.Mixes["smallbank"],
		MixName: "smallbank", Dist: dist, Skew: "uniform", Accounts: accounts, Clients: 8,
		Warmup: 200 * time.Millisecond, Duration: time.Second, Seed: 1,
		CPU: []bank.Process{
			{Role: bank.RoleData, Name: "redis", PID: dataSrv.Cmd.Process.Pid},
			{Role: bank.RoleLock, Name: "redis", PID: lockSrv.Cmd.Process.Pid},
			{Role: bank.RoleLock, Name: "ghost", PID: gone},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.All.Committed == 0 {
		t.Fatal("nothing committed")
	}
	var roles []string
	for _, p := range res.CPU {
		roles = append(roles, p.Role+":"+p.Name)
		if p.CPU < 0 || p.PerTxn != float64(p.CPU)/1e3/float64(res.All.Committed) {
			t.Errorf("%s:%s used %v, %.3f µs per txn, over %d txns", p.Role, p.Name, p.CPU, p.PerTxn, res.All.Committed)
		}
	}
	if got := strings.Join(roles, " "); got != "client:bank data:redis lock:redis" {
		t.Fatalf("measured %s; want the bank, then the two servers that exist", got)
	}
	// Thousands of commands cost the servers and the bank measurable CPU.
	if res.CPU[0].CPU <= 0 || res.CPU[1].CPU <= 0 {
		t.Errorf("no CPU for the bank or its data server: %+v", res.CPU)
	}
	if res.CPUPerTxn[bank.RoleLock] != res.CPU[2].PerTxn || res.CPUPerTxn[bank.RoleData] != res.CPU[1].PerTxn || res.MachineBusy <= 0 {
		t.Errorf("per role %v, machine %.2f cores, from %+v", res.CPUPerTxn, res.MachineBusy, res.CPU)
	}
	if !strings.Contains(strings.Join(res.Errors, "\n"), "CPU of lock ghost") {
		t.Errorf("an unreadable process is not reported: %v", res.Errors)
	}

	path := filepath.Join(t.TempDir(), "r.json")
	if err := res.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := bank.LoadResult(path)
	if err != nil || len(back.CPU) != 3 || back.CPU[2] != res.CPU[2] || back.CPUPerTxn[bank.RoleClient] != res.CPUPerTxn[bank.RoleClient] {
		t.Fatalf("JSON round trip: %v, %+v", err, back)
	}
	row := res.CSVRow()
	if len(row) != len(bank.CSVHeader) {
		t.Fatalf("CSV row has %d fields, header %d", len(row), len(bank.CSVHeader))
	}
	col := map[string]string{}
	for i, h := range bank.CSVHeader {
		col[h] = row[i]
	}
	if col["cpu_lock_us_per_txn"] == "" || !strings.Contains(col["cpu_processes_us_per_txn"], "data:redis=") {
		t.Errorf("CSV CPU columns: %v", col)
	}
}
