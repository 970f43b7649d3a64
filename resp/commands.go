package resp

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// command is one entry of the command table. Arity counts the command name,
// as Redis does; maxArgs 0 means unbounded. first/last/step describe where
// the keys are, for COMMAND. lock marks commands that call into the lock
// table in a way that can wait (for a queue, or for a memory node across
// the network): the event loop runs them only on its lockmap.Loop, which
// never blocks, and otherwise on a goroutine (loop.go).
type command struct {
	name              string // lower case, the key in commands
	run               func(s *Server, st *connState, args [][]byte)
	minArgs, maxArgs  int
	noAuth            bool
	write             bool
	lock              bool
	first, last, step int
}

var commands map[string]*command

// CommandNames lists every name Config.OnCommand may be called with: the
// command table's, "unknown" and "empty".
func CommandNames() []string {
	names := []string{"unknown", "empty"}
	for _, c := range commands {
		names = append(names, c.name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func init() {
	commands = map[string]*command{
		// Connection and handshake.
		"ping":    {run: (*Server).cmdPing, minArgs: 1, maxArgs: 2},
		"echo":    {run: (*Server).cmdEcho, minArgs: 2, maxArgs: 2},
		"hello":   {run: (*Server).cmdHello, minArgs: 1, noAuth: true},
		"auth":    {run: (*Server).cmdAuth, minArgs: 2, maxArgs: 3, noAuth: true},
		"client":  {run: (*Server).cmdClient, minArgs: 2},
		"select":  {run: (*Server).cmdSelect, minArgs: 2, maxArgs: 2},
		"info":    {run: (*Server).cmdInfo, minArgs: 1},
		"command": {run: (*Server).cmdCommand, minArgs: 1},
		"quit":    {run: (*Server).cmdQuit, minArgs: 1, noAuth: true},
		"reset":   {run: (*Server).cmdReset, minArgs: 1, maxArgs: 1, noAuth: true},
		"dbsize":  {run: (*Server).cmdDBSize, minArgs: 1, maxArgs: 1},
		"time":    {run: (*Server).cmdTime, minArgs: 1, maxArgs: 1},

		// Locks under Redis names.
		"set":     {run: (*Server).cmdSet, lock: true, minArgs: 3, write: true, first: 1, last: 1, step: 1},
		"get":     {run: (*Server).cmdGet, lock: true, minArgs: 2, maxArgs: 2, first: 1, last: 1, step: 1},
		"del":     {run: (*Server).cmdDel, lock: true, minArgs: 2, write: true, first: 1, last: -1, step: 1},
		"unlink":  {run: (*Server).cmdDel, lock: true, minArgs: 2, write: true, first: 1, last: -1, step: 1},
		"exists":  {run: (*Server).cmdExists, lock: true, minArgs: 2, first: 1, last: -1, step: 1},
		"pexpire": {run: (*Server).cmdPExpire, lock: true, minArgs: 3, maxArgs: 4, write: true, first: 1, last: 1, step: 1},
		"expire":  {run: (*Server).cmdExpire, lock: true, minArgs: 3, maxArgs: 4, write: true, first: 1, last: 1, step: 1},
		"pttl":    {run: (*Server).cmdPTTL, lock: true, minArgs: 2, maxArgs: 2, first: 1, last: 1, step: 1},
		"ttl":     {run: (*Server).cmdTTL, lock: true, minArgs: 2, maxArgs: 2, first: 1, last: 1, step: 1},
		"persist": {run: (*Server).cmdPersist, minArgs: 2, maxArgs: 2, write: true, first: 1, last: 1, step: 1},

		// Scripts.
		"eval":    {run: (*Server).cmdEval, lock: true, minArgs: 3, write: true},
		"evalsha": {run: (*Server).cmdEvalSHA, lock: true, minArgs: 3, write: true},
		"script":  {run: (*Server).cmdScript, minArgs: 2},

		// Extensions: what Redis cannot do.
		"lock.acquire": {run: (*Server).cmdLockAcquire, lock: true, minArgs: 3, write: true, first: 1, last: 1, step: 1},
		"lock.release": {run: (*Server).cmdLockRelease, lock: true, minArgs: 3, maxArgs: 3, write: true, first: 1, last: 1, step: 1},
		"lock.extend":  {run: (*Server).cmdLockExtend, lock: true, minArgs: 5, maxArgs: 5, write: true, first: 1, last: 1, step: 1},
		"lock.info":    {run: (*Server).cmdLockInfo, lock: true, minArgs: 2, maxArgs: 2, first: 1, last: 1, step: 1},

		// Range locks (docs/rangelock.md).
		"lock.range.acquire": {run: (*Server).cmdLockRangeAcquire, lock: true, minArgs: 5, write: true, first: 1, last: 1, step: 1},
		"lock.range.release": {run: (*Server).cmdLockRangeRelease, lock: true, minArgs: 5, maxArgs: 5, write: true, first: 1, last: 1, step: 1},
		"lock.range.info":    {run: (*Server).cmdLockRangeInfo, lock: true, minArgs: 2, maxArgs: 2, first: 1, last: 1, step: 1},
	}
	for name, c := range commands {
		c.name = name
	}
}

// unknownCommand phrases the error the way Redis does, so clients show it
// unchanged, and adds why: this is a lock proxy, not a Redis.
func unknownCommand(name string, args [][]byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ERR unknown command '%s', with args beginning with: ", wire.OneLine(name))
	for i, a := range args {
		if i == 4 {
			break
		}
		fmt.Fprintf(&b, "'%s' ", wire.OneLine(string(a)))
	}
	b.WriteString("(this is shiftlock-proxy, a lock proxy: it serves SET NX, GET, DEL, PEXPIRE, PTTL, EXISTS, " +
		"the lock scripts of common clients and LOCK.*; keep data in a real Redis)")
	return b.String()
}

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
