package flagfile

import (
	"flag"
	"strings"
	"time"
)

// Layers applies the rule to one configuration: flags are bound to its
// fields, and Apply, after the flag set is parsed, loads the -config file
// over the defaults already in it and then sets the fields of the flags
// given on the command line, and only those. A flag left out thus never
// undoes the file, and every command states each setting once: its field,
// its flag, its usage.
//
//	cfg := defaultConfig()
//	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
//	l := flagfile.New(fs, "YAML config file (flags override it)")
//	l.String(&cfg.Listen, "listen", cfg.Listen, "RESP address")
//	if err := fs.Parse(args); err != nil { ... }
//	if err := l.Apply(&cfg); err != nil { ... }
type Layers struct {
	fs    *flag.FlagSet
	file  *string
	flags []layered
}

// layered is one flag: its name, and how to copy its parsed value into the
// configuration once the file is loaded.
type layered struct {
	name  string
	apply func()
}

// New registers -config on fs, with usage as its help.
func New(fs *flag.FlagSet, usage string) *Layers {
	return &Layers{fs: fs, file: fs.String("config", "", usage)}
}

// File is the -config path given, "" for none.
func (l *Layers) File() string { return *l.file }

// bind defines a flag of type T with define (one of flag.FlagSet's XxxVar
// methods) on a value of its own, which Apply copies into *field if the flag
// was given. def is only what -h shows as the default; the field's own value
// is the default that counts.
func bind[T any](l *Layers, field *T, name string, def T, usage string, define func(*T, string, T, string)) {
	v := new(T)
	define(v, name, def, usage)
	l.flags = append(l.flags, layered{name, func() { *field = *v }})
}

// String binds a string flag to field.
func (l *Layers) String(field *string, name, def, usage string) {
	bind(l, field, name, def, usage, l.fs.StringVar)
}

// Bool binds a bool flag to field.
func (l *Layers) Bool(field *bool, name string, def bool, usage string) {
	bind(l, field, name, def, usage, l.fs.BoolVar)
}

// Int binds an int flag to field.
func (l *Layers) Int(field *int, name string, def int, usage string) {
	bind(l, field, name, def, usage, l.fs.IntVar)
}

// Uint64 binds a uint64 flag to field.
func (l *Layers) Uint64(field *uint64, name string, def uint64, usage string) {
	bind(l, field, name, def, usage, l.fs.Uint64Var)
}

// Float64 binds a float64 flag to field.
func (l *Layers) Float64(field *float64, name string, def float64, usage string) {
	bind(l, field, name, def, usage, l.fs.Float64Var)
}

// Duration binds a time.Duration flag to field.
func (l *Layers) Duration(field *time.Duration, name string, def time.Duration, usage string) {
	bind(l, field, name, def, usage, l.fs.DurationVar)
}

// List binds a repeatable, comma-separated flag to field: given, its items
// (from every occurrence, in order) replace the file's list.
func (l *Layers) List(field *[]string, name, usage string) {
	v := new(List)
	l.fs.Var(v, name, usage)
	l.flags = append(l.flags, layered{name, func() { *field = *v }})
}

// Func binds a flag whose value needs translating: set is called with the
// flag's last value, if it was given, after the file is loaded.
func (l *Layers) Func(name, usage string, set func(value string)) {
	v := new(string)
	l.fs.StringVar(v, name, "", usage)
	l.flags = append(l.flags, layered{name, func() { set(*v) }})
}

// Apply loads the -config file, if one was given, into cfg (a pointer to
// the configuration holding the defaults), then sets the fields of the
// flags given on the command line. Call it after the flag set is parsed.
func (l *Layers) Apply(cfg any) error {
	if *l.file != "" {
		if err := Load(*l.file, cfg); err != nil {
			return err
		}
	}
	given := Given(l.fs)
	for _, f := range l.flags {
		if given[f.name] {
			f.apply()
		}
	}
	return nil
}

// List is a repeatable, comma-separated flag value: "-x a,b -x c" is
// [a b c]; blanks around items and empty items are dropped.
type List []string

func (s *List) String() string { return strings.Join(*s, ",") }

// Set adds the comma-separated items of v.
func (s *List) Set(v string) error {
	*s = append(*s, Split(v)...)
	return nil
}

// Split is v's comma-separated items, blanks around them and empty ones
// dropped.
func Split(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
