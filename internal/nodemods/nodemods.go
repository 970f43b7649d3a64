// Package nodemods installs the pinned npm packages of a directory
// (package.json and package-lock.json, as itest/node holds them) with
// `npm ci` into a cache directory outside the repository, keyed by both
// files, so that a clean machine needs only node, npm
// (scripts/install-deps.sh) and the npm registry, and the tests and the
// benchmarks that run real Node.js clients share one installation.
package nodemods

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Install returns the node_modules directory of src's lock file,
// installing it on first use. Processes that ask at once (test binaries of
// several packages) are serialised by an flock.
func Install(src string) (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", errors.New("node missing (scripts/install-deps.sh installs it)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", errors.New("npm missing (scripts/install-deps.sh installs it)")
	}
	pkg, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		return "", err
	}
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(pkg, lock...))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "shiftlock-proxy", "node-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lf, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	mods := filepath.Join(dir, "node_modules")
	done := filepath.Join(dir, ".installed")
	if _, err := os.Stat(done); err == nil {
		return mods, nil
	}
	for name, data := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s: %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", err
	}
	return mods, nil
}
