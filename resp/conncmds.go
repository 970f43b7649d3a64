package resp

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

func (s *Server) cmdPing(st *connState, args [][]byte) {
	if len(args) == 2 {
		st.w.bulkBytes(args[1])
		return
	}
	st.w.status("PONG")
}

func (s *Server) cmdEcho(st *connState, args [][]byte) { st.w.bulkBytes(args[1]) }

func (s *Server) cmdQuit(st *connState, args [][]byte) { st.w.status("OK") }

func (s *Server) cmdReset(st *connState, args [][]byte) {
	st.resp3, st.name = false, ""
	st.db.Store(0)
	st.infoMu.Lock()
	st.authed, st.user = !s.needsAuth(), nil
	st.infoMu.Unlock()
	st.w.resp3 = false
	st.w.status("RESET")
}

func (s *Server) cmdSelect(st *connState, args [][]byte) {
	n, ok := parseInteger(args[1])
	switch {
	case !ok:
		st.w.err("ERR value is not an integer or out of range")
	case n < 0 || n >= Databases:
		st.w.err("ERR DB index is out of range")
	default:
		st.db.Store(int32(n))
		st.w.status("OK")
	}
}

// Databases is how many databases SELECT chooses from, as Redis's default
// "databases 16". Lock clients are often configured with one other than 0
// (redis://host:6379/3, go-redis Options.DB, redis-py db=3), and send
// SELECT on every new connection; refusing it made the client fail to
// connect.
const Databases = 16

// dbKey is the lock name of key in database db (not 0, whose keys are
// their own names): a prefix that no key a client is likely to use begins
// with, so that databases do not share locks, as Redis's do not share
// keys. A database-0 key that spells "\x00db3\x00k" is the lock of k in
// database 3.
func dbKey(db int32, key []byte) []byte {
	b := make([]byte, 0, len(key)+6)
	b = append(b, 0, 'd', 'b')
	b = strconv.AppendInt(b, int64(db), 10)
	b = append(b, 0)
	return append(b, key...)
}

// nameKeys replaces c's keys in args by their lock names in database db.
func nameKeys(c *command, args [][]byte, db int32) {
	if db == 0 {
		return
	}
	first, last, step := keySpan(c, args)
	for i := first; i <= last; i += step {
		args[i] = dbKey(db, args[i])
	}
}

// clientKey is the key a client named, for a lock name dbKey made.
func clientKey(name string) string {
	if len(name) < 5 || name[0] != 0 || name[1] != 'd' || name[2] != 'b' {
		return name
	}
	if i := strings.IndexByte(name[3:], 0); i > 0 && i <= 2 {
		return name[3+i+1:]
	}
	return name
}

func (s *Server) cmdDBSize(st *connState, args [][]byte) { st.w.int(int64(s.cfg.Map.Count())) }

func (s *Server) cmdTime(st *connState, args [][]byte) {
	now := time.Now()
	st.w.array(2)
	st.w.bulk(strconv.FormatInt(now.Unix(), 10))
	st.w.bulk(strconv.FormatInt(int64(now.Nanosecond()/1000), 10))
}

func (s *Server) cmdAuth(st *connState, args [][]byte) {
	user, pass := "", string(args[1])
	if len(args) == 3 {
		user, pass = string(args[1]), string(args[2])
	}
	if !s.needsAuth() {
		st.w.err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	u, ok := s.authenticate(user, pass)
	if !ok {
		st.w.err("WRONGPASS invalid username-password pair or user is disabled.")
		return
	}
	st.infoMu.Lock()
	st.authed, st.user = true, u
	st.infoMu.Unlock()
	st.w.status("OK")
}

// cmdHello is HELLO [protover [AUTH user pass] [SETNAME name]].
func (s *Server) cmdHello(st *connState, args [][]byte) {
	proto := 0
	if len(args) > 1 {
		p, err := strconv.Atoi(string(args[1]))
		if err != nil {
			st.w.err("ERR Protocol version is not an integer or out of range")
			return
		}
		if p != 2 && p != 3 {
			st.w.err("NOPROTO unsupported protocol version")
			return
		}
		proto = p
	}
	authed, name, u := st.authed, st.name, st.user
	for i := 2; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "auth":
			if i+2 >= len(args) {
				st.w.err("ERR syntax error in HELLO option 'auth'")
				return
			}
			nu, ok := s.authenticate(string(args[i+1]), string(args[i+2]))
			if !ok {
				st.w.err("WRONGPASS invalid username-password pair or user is disabled.")
				return
			}
			authed, u = true, nu
			i += 2
		case "setname":
			if i+1 >= len(args) {
				st.w.err("ERR syntax error in HELLO option 'setname'")
				return
			}
			name = string(args[i+1])
			i++
		default:
			st.w.err(fmt.Sprintf("ERR syntax error in HELLO option '%s'", wire.OneLine(string(args[i]))))
			return
		}
	}
	if !authed {
		st.w.err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	st.infoMu.Lock()
	st.authed, st.name, st.user = true, name, u
	st.infoMu.Unlock()
	if proto != 0 {
		st.resp3 = proto == 3
		st.w.resp3 = st.resp3
	}
	cur := 2
	if st.resp3 {
		cur = 3
	}
	st.w.mapHeader(7)
	st.w.bulkField("server", "redis")
	st.w.bulkField("version", s.cfg.Version)
	st.w.intField("proto", int64(cur))
	st.w.intField("id", st.id)
	st.w.bulkField("mode", "standalone")
	st.w.bulkField("role", "master")
	st.w.bulk("modules")
	st.w.array(0)
}

// cmdClient answers what clients send on connect; lock semantics do not
// depend on any of it.
func (s *Server) cmdClient(st *connState, args [][]byte) {
	sub := strings.ToLower(string(args[1]))
	switch sub {
	case "setname":
		if len(args) != 3 {
			st.w.err("ERR wrong number of arguments for 'client|setname' command")
			return
		}
		if strings.ContainsAny(string(args[2]), " \n") {
			st.w.err("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		st.infoMu.Lock()
		st.name = string(args[2])
		st.infoMu.Unlock()
		st.w.status("OK")
	case "getname":
		if st.name == "" {
			st.w.null()
			return
		}
		st.w.bulk(st.name)
	case "id":
		st.w.int(st.id)
	case "setinfo":
		if len(args) != 4 {
			st.w.err("ERR wrong number of arguments for 'client|setinfo' command")
			return
		}
		switch strings.ToLower(string(args[2])) {
		case "lib-name":
			st.infoMu.Lock()
			st.libName = string(args[3])
			st.infoMu.Unlock()
		case "lib-ver":
			st.infoMu.Lock()
			st.libVer = string(args[3])
			st.infoMu.Unlock()
		default:
			st.w.err(fmt.Sprintf("ERR Unrecognized option '%s'", wire.OneLine(string(args[2]))))
			return
		}
		st.w.status("OK")
	case "tracking", "maint_notifications", "no-evict", "no-touch", "reply":
		// Accepted and ignored: a lock proxy has no cache to track and no
		// maintenance events to push; clients enable these on connect.
		st.w.status("OK")
	case "info":
		st.w.verbatim(st.clientLine(time.Now()) + "\n")
	case "list":
		s.clientList(st, args[2:])
	case "kill":
		s.clientKill(st, args[2:])
	default:
		st.w.err(fmt.Sprintf("ERR unknown subcommand '%s'. Try CLIENT HELP.", wire.OneLine(sub)))
	}
}

func (s *Server) cmdInfo(st *connState, args [][]byte) {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := len(want) == 0 || want["all"] || want["default"] || want["everything"]
	var b strings.Builder
	section := func(name string, lines ...string) {
		if !all && !want[strings.ToLower(name)] {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		fmt.Fprintf(&b, "# %s\r\n", name)
		for _, l := range lines {
			b.WriteString(l)
			b.WriteString("\r\n")
		}
	}
	host, _ := os.Hostname()
	uptime := int64(time.Since(s.started).Seconds())
	section("Server",
		"redis_version:"+s.cfg.Version,
		"redis_mode:standalone",
		"server_name:shiftlock-proxy",
		"os:"+runtime.GOOS+" "+runtime.GOARCH,
		"process_id:"+strconv.Itoa(os.Getpid()),
		"hostname:"+host,
		"uptime_in_seconds:"+strconv.FormatInt(uptime, 10),
	)
	// Redis 7.2's fields, which redis_exporter reads; what the proxy does
	// not track (client-side caching, buffer peaks) is 0.
	section("Clients", "connected_clients:"+strconv.FormatInt(s.clients.Load(), 10),
		"cluster_connections:0",
		"maxclients:"+strconv.Itoa(s.cfg.MaxClients),
		"client_recent_max_input_buffer:0",
		"client_recent_max_output_buffer:0",
		"blocked_clients:"+strconv.FormatInt(s.blocked.Load(), 10),
		"tracking_clients:0",
		"clients_in_timeout_table:"+strconv.FormatInt(s.blocked.Load(), 10))
	section("Stats", "total_connections_received:"+strconv.FormatInt(s.nextID.Load(), 10),
		"rejected_connections:"+strconv.FormatInt(s.refused.Load(), 10))
	section("Persistence", "loading:0")
	section("Replication", "role:master", "connected_slaves:0")
	locks := []string{"locks_held:" + strconv.Itoa(s.cfg.Map.Count()), "memnodes:" + strconv.Itoa(len(s.cfg.Map.Domains()))}
	for i, d := range s.cfg.Map.Domains() {
		lease := "ok"
		if d.Lease != nil {
			if err := d.Lease.Valid(); err != nil {
				lease = "lost"
			}
		}
		st := d.Client.Stats()
		locks = append(locks, fmt.Sprintf("memnode%d:addr=%s,node=%d,lease=%s,exclusive_grants=%d,shared_grants=%d,handovers=%d,mode_changes=%d,waits=%d,try_failures=%d,abandoned_waits=%d",
			i, d.Name, d.Client.Node(), lease, st.ExclusiveGrants.Load(), st.SharedGrants.Load(), st.Handovers.Load(), st.ModeChanges.Load(), st.Waits.Load(), st.TryFailures.Load(), st.Abandoned.Load()))
	}
	if s.cfg.Info != nil {
		locks = append(locks, s.cfg.Info()...)
	}
	section("Locks", locks...)
	section("Keyspace")
	st.w.verbatim(b.String())
}

// cmdCommand answers COMMAND, COMMAND COUNT, COMMAND INFO and COMMAND DOCS
// well enough for clients that probe the server's commands on connect.
func (s *Server) cmdCommand(st *connState, args [][]byte) {
	if len(args) >= 2 {
		switch strings.ToLower(string(args[1])) {
		case "count":
			st.w.int(int64(len(commands)))
			return
		case "docs":
			st.w.mapHeader(0)
			return
		case "info":
			st.w.array(len(args) - 2)
			for _, a := range args[2:] {
				name := strings.ToLower(string(a))
				if c, ok := commands[name]; ok {
					s.writeCommandInfo(st, name, c)
				} else {
					st.w.null()
				}
			}
			return
		default:
			st.w.err(fmt.Sprintf("ERR unknown subcommand '%s'. Try COMMAND HELP.", wire.OneLine(string(args[1]))))
			return
		}
	}
	names := commandNames()
	st.w.array(len(names))
	for _, n := range names {
		s.writeCommandInfo(st, n, commands[n])
	}
}

func (s *Server) writeCommandInfo(st *connState, name string, c *command) {
	arity := int64(c.minArgs)
	if c.maxArgs != c.minArgs {
		arity = -arity
	}
	flags := []string{"fast"}
	if c.write {
		flags = []string{"write"}
	}
	st.w.array(6)
	st.w.bulk(name)
	st.w.int(arity)
	st.w.array(len(flags))
	for _, f := range flags {
		st.w.status(f)
	}
	st.w.int(int64(c.first))
	st.w.int(int64(c.last))
	st.w.int(int64(c.step))
}

// clientLine is the connection's line in CLIENT LIST and CLIENT INFO, with
// Redis 7.2's fields in Redis's order. What a lock proxy does not have
// (subscriptions, MULTI, per-client buffers it does not track) is 0 or -1.
// flags is N, or b while a command waits in a lock's queue (as Redis marks
// a client blocked in BLPOP).
func (st *conn) clientLine(now time.Time) string {
	st.infoMu.Lock()
	name, libName, libVer, user := st.name, st.libName, st.libVer, "default"
	if st.user != nil {
		user = st.user.Name
	}
	st.infoMu.Unlock()
	flags := "N"
	if st.waiting.Load() > 0 {
		flags = "b"
	}
	cmd := "NULL"
	if c := st.last.Load(); c != nil {
		cmd = c.name
	}
	resp := 2
	if st.resp3 {
		resp = 3
	}
	age := int64(now.Sub(st.opened) / time.Second)
	idle := (now.UnixNano() - st.active.Load()) / int64(time.Second)
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=-1 name=%s age=%d idle=%d flags=%s db=%d sub=0 psub=0 ssub=0 multi=-1 "+
		"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=%s user=%s "+
		"redir=-1 resp=%d lib-name=%s lib-ver=%s",
		st.id, st.addr, st.laddr, name, max(age, 0), max(idle, 0), flags, st.db.Load(), cmd, user, resp, libName, libVer)
}

// listClients is every connected client, in id order.
func (s *Server) listClients() []*conn {
	var out []*conn
	s.conns.Range(func(_, v any) bool {
		out = append(out, v.(*conn))
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// clientList is CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...].
func (s *Server) clientList(st *connState, args [][]byte) {
	var ids map[int64]bool
	typ := ""
	for i := 0; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "type":
			if i+1 >= len(args) {
				st.w.err("ERR syntax error")
				return
			}
			i++
			typ = strings.ToLower(string(args[i]))
			switch typ {
			case "normal", "master", "replica", "slave", "pubsub":
			default:
				st.w.err(fmt.Sprintf("ERR Unknown client type '%s'", wire.OneLine(string(args[i]))))
				return
			}
		case "id":
			if i+1 >= len(args) {
				st.w.err("ERR syntax error")
				return
			}
			ids = map[int64]bool{}
			for i++; i < len(args); i++ {
				id, err := strconv.ParseInt(string(args[i]), 10, 64)
				if err != nil || id <= 0 {
					st.w.err("ERR Invalid client ID")
					return
				}
				ids[id] = true
			}
		default:
			st.w.err("ERR syntax error")
			return
		}
	}
	var b strings.Builder
	if typ == "" || typ == "normal" {
		now := time.Now()
		for _, c := range s.listClients() {
			if ids != nil && !ids[c.id] {
				continue
			}
			b.WriteString(c.clientLine(now))
			b.WriteByte('\n')
		}
	}
	st.w.verbatim(b.String())
}

// clientKill is CLIENT KILL addr:port (the old form: +OK or an error), or
// CLIENT KILL with filters ID, ADDR, LADDR, TYPE, USER, SKIPME and MAXAGE
// (the number killed). Killing closes the connection: a command of it
// queued in a lock gives up, as on a hang-up.
func (s *Server) clientKill(st *connState, args [][]byte) {
	if len(args) == 1 {
		addr := string(args[0])
		for _, c := range s.listClients() {
			if c.addr == addr {
				c.kill()
				st.w.status("OK")
				return
			}
		}
		st.w.err("ERR No such client")
		return
	}
	if len(args) == 0 || len(args)%2 != 0 {
		st.w.err("ERR syntax error")
		return
	}
	var (
		id          int64
		addr, laddr string
		skipMe            = true
		maxAge      int64 = -1
		none        bool  // a filter no client of ours can match
		user        string
	)
	for i := 0; i < len(args); i += 2 {
		v := string(args[i+1])
		switch strings.ToLower(string(args[i])) {
		case "id":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				st.w.err("ERR client-id should be greater than 0")
				return
			}
			id = n
		case "addr":
			addr = v
		case "laddr":
			laddr = v
		case "type":
			switch strings.ToLower(v) {
			case "normal":
			case "master", "replica", "slave", "pubsub":
				none = true
			default:
				st.w.err(fmt.Sprintf("ERR Unknown client type '%s'", wire.OneLine(v)))
				return
			}
		case "user":
			user = v
		case "skipme":
			switch strings.ToLower(v) {
			case "yes":
				skipMe = true
			case "no":
				skipMe = false
			default:
				st.w.err("ERR syntax error")
				return
			}
		case "maxage":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				st.w.err("ERR syntax error")
				return
			}
			maxAge = n
		default:
			st.w.err("ERR syntax error")
			return
		}
	}
	killed := 0
	now := time.Now()
	for _, c := range s.listClients() {
		switch {
		case none,
			id != 0 && c.id != id,
			addr != "" && c.addr != addr,
			laddr != "" && c.laddr != laddr,
			skipMe && c == st.conn,
			user != "" && c.userName() != user,
			maxAge >= 0 && int64(now.Sub(c.opened)/time.Second) < maxAge:
			continue
		}
		c.kill()
		killed++
	}
	st.w.int(int64(killed))
}

// userName is the connection's user as CLIENT LIST shows it.
func (st *conn) userName() string {
	st.infoMu.Lock()
	defer st.infoMu.Unlock()
	if st.user == nil {
		return "default"
	}
	return st.user.Name
}
