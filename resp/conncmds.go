package resp

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
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
	st.authed = s.cfg.Password == ""
	st.w.resp3 = false
	st.w.status("RESET")
}

func (s *Server) cmdSelect(st *connState, args [][]byte) {
	if string(args[1]) != "0" {
		st.w.err("ERR DB index is out of range")
		return
	}
	st.w.status("OK")
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
	if s.cfg.Password == "" {
		st.w.err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	if !s.checkPassword(user, pass) {
		st.w.err("WRONGPASS invalid username-password pair or user is disabled.")
		return
	}
	st.authed = true
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
	authed, name := st.authed, st.name
	for i := 2; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "auth":
			if i+2 >= len(args) {
				st.w.err("ERR syntax error in HELLO option 'auth'")
				return
			}
			if s.cfg.Password == "" || !s.checkPassword(string(args[i+1]), string(args[i+2])) {
				st.w.err("WRONGPASS invalid username-password pair or user is disabled.")
				return
			}
			authed = true
			i += 2
		case "setname":
			if i+1 >= len(args) {
				st.w.err("ERR syntax error in HELLO option 'setname'")
				return
			}
			name = string(args[i+1])
			i++
		default:
			st.w.err(fmt.Sprintf("ERR syntax error in HELLO option '%s'", oneLine(string(args[i]))))
			return
		}
	}
	if !authed {
		st.w.err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	st.authed, st.name = true, name
	if proto != 0 {
		st.resp3 = proto == 3
		st.w.resp3 = st.resp3
	}
	cur := 2
	if st.resp3 {
		cur = 3
	}
	st.w.mapHeader(7)
	st.w.bulk("server")
	st.w.bulk("redis")
	st.w.bulk("version")
	st.w.bulk(s.cfg.Version)
	st.w.bulk("proto")
	st.w.int(int64(cur))
	st.w.bulk("id")
	st.w.int(st.id)
	st.w.bulk("mode")
	st.w.bulk("standalone")
	st.w.bulk("role")
	st.w.bulk("master")
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
		st.name = string(args[2])
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
			st.libName = string(args[3])
		case "lib-ver":
			st.libVer = string(args[3])
		default:
			st.w.err(fmt.Sprintf("ERR Unrecognized option '%s'", oneLine(string(args[2]))))
			return
		}
		st.w.status("OK")
	case "tracking", "maint_notifications", "no-evict", "no-touch", "reply":
		// Accepted and ignored: a lock proxy has no cache to track and no
		// maintenance events to push; clients enable these on connect.
		st.w.status("OK")
	case "info":
		st.w.verbatim(fmt.Sprintf("id=%d addr=? name=%s db=0 resp=%d lib-name=%s lib-ver=%s\n", st.id, st.name, map[bool]int{false: 2, true: 3}[st.resp3], st.libName, st.libVer))
	default:
		st.w.err(fmt.Sprintf("ERR unknown subcommand '%s'. Try CLIENT HELP.", oneLine(sub)))
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
	section("Clients", "connected_clients:"+strconv.FormatInt(s.clients.Load(), 10),
		"maxclients:"+strconv.Itoa(s.cfg.MaxClients),
		"blocked_clients:"+strconv.FormatInt(s.blocked.Load(), 10))
	section("Stats", "rejected_connections:"+strconv.FormatInt(s.refused.Load(), 10))
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
			st.w.err(fmt.Sprintf("ERR unknown subcommand '%s'. Try COMMAND HELP.", oneLine(string(args[1]))))
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
