// Package flagfile is the configuration rule every command of the project
// follows: defaults, then a YAML file, then the flags given on the command
// line, each overriding the one before.
package flagfile

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"gopkg.in/yaml.v3"
)

// Load decodes the YAML file at path into cfg, which holds the defaults.
// Keys the file does not name keep them; a key cfg does not know is an
// error, because a misspelt key silently keeping its default is worse.
func Load(path string, cfg any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Given returns the names of the flags fs was given on the command line:
// only those override the file.
func Given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return set
}
