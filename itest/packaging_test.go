package itest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestPackagingCommandLines: every command line in packaging/ (the compose
// services and the systemd units) names flags the binaries accept, so that
// a renamed flag cannot break a deployment that nothing here can run (no
// container runtime on these machines; see packaging/Dockerfile).
func TestPackagingCommandLines(t *testing.T) {
	root, err := testproc.Root()
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{"proxy": testproc.Bin(t, "proxy"), "memnode": testproc.Bin(t, "memnode")}
	accepts := func(what, bin string, args []string) {
		t.Helper()
		// Flags parse up to -h, which then prints usage and exits 0; an
		// unknown or malformed flag before it exits 2.
		out, err := exec.Command(bin, append(args, "-h")...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %s %v: %v\n%s", what, filepath.Base(bin), args, err, out)
		}
	}

	var compose struct {
		Services map[string]struct {
			Entrypoint []string `yaml:"entrypoint"`
			Command    []string `yaml:"command"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(repoFile(t, "packaging/compose.yaml"), &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if len(compose.Services) != 3 {
		t.Fatalf("compose.yaml has %d services, want a memnode and two proxies", len(compose.Services))
	}
	env := regexp.MustCompile(`\$\{[^}]*\}`)
	for name, svc := range compose.Services {
		bin := bins["proxy"]
		if len(svc.Entrypoint) > 0 && strings.HasSuffix(svc.Entrypoint[0], "memnode") {
			bin = bins["memnode"]
		}
		var args []string
		for _, a := range svc.Command {
			a = env.ReplaceAllString(a, "x")
			if strings.HasPrefix(a, "/etc/shiftlock/") {
				a = filepath.Join(root, "configs", filepath.Base(a))
			}
			args = append(args, a)
		}
		accepts("compose service "+name, bin, args)
	}

	units, _ := filepath.Glob(filepath.Join(root, "packaging/*.service"))
	if len(units) != 2 {
		t.Fatalf("%d systemd units, want the proxy's and the memnode's", len(units))
	}
	for _, u := range units {
		f, err := os.Open(u)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		found := false
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "ExecStart=")
			if !ok {
				continue
			}
			found = true
			fields := strings.Fields(line)
			bin := bins["proxy"]
			if strings.Contains(fields[0], "memnode") {
				bin = bins["memnode"]
			}
			var args []string
			for _, a := range fields[1:] {
				if strings.HasPrefix(a, "/etc/shiftlock/") {
					a = filepath.Join(root, "configs", filepath.Base(a))
				}
				args = append(args, a)
			}
			accepts(filepath.Base(u), bin, args)
		}
		f.Close()
		if !found {
			t.Errorf("%s has no ExecStart", u)
		}
	}
}
