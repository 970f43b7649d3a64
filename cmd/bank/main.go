// Command bank is SmallBank on Redis with a choice of lockers, side by side:
// RedLock (redsync over redis-servers), the same redsync code pointed at
// shiftlock-proxy, the native ShiftLock client, and no locks.
//
//	bank load   -redis 127.0.0.1:6379 -accounts 1000000
//	bank run    -redis 127.0.0.1:6379 -locker proxy -proxy 127.0.0.1:6380 -skew zipf:0.99 -duration 30s \
//	            -cpu data:redis=$REDIS_PID -cpu lock:proxy=$PROXY_PID
//
// The tables and figures made from run -out files come from bankreport, in
// the evaluation module (bench/cmd/bankreport); make demo and make
// bench-bank build and run it.
//
// run prints goodput and latency percentiles per transaction type, the CPU
// per committed transaction of itself and of every -cpu process, audits
// the money, and exits 1 if the audit fails (except for the none locker,
// whose audit is expected to fail). See bank's package documentation for the
// schema and the locking rules.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
)

func main() { procutil.Main(mainArgs) }

const usage = `usage: bank load|run [flags]   (bank <cmd> -h for the flags)`

func mainArgs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "load":
		err = loadCmd(ctx, args[1:], stdout, stderr)
	case "run":
		err = runCmd(ctx, args[1:], stdout, stderr)
	case "report":
		// Moved with its plotting dependencies; say where rather than
		// print the usage line, for whoever still has the old command.
		fmt.Fprintln(stderr, "bank: report moved to bankreport (cd bench && go build ./cmd/bankreport); make demo and make bench-bank run it")
		return 2
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return 0
	default:
		fmt.Fprintln(stderr, usage)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errAudit):
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "bank:", err)
		return 1
	}
	return 0
}
