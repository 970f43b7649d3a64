package itest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// pki is a throwaway CA with the certificates a TLS test needs, as PEM
// files in a temporary directory.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), ca: ca, caKey: key}
	p.caFile = p.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate for 127.0.0.1 (server) or a client, and
// returns its certificate and key files.
func (p *pki) issue(t *testing.T, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

func (p *pki) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return pool
}

func tlsAddr(t *testing.T, proxy *testproc.Proc) string {
	t.Helper()
	m := regexp.MustCompile(`proxy tls listening on (\S+)`).FindStringSubmatch(proxy.Output())
	if m == nil {
		t.Fatalf("no TLS port in the proxy's output:\n%s", proxy.Output())
	}
	return m[1]
}

// TestTLSPort: the TLS port serves go-redis, redis-cli --tls and redis-py
// over TLS, next to the plain port; a client that does not trust the
// server's certificate cannot connect.
func TestTLSPort(t *testing.T) {
	ca := newPKI(t, "proxy")
	cert, key := ca.issue(t, "server", true)
	p := testproc.Proxy(t, "-tls-listen", "127.0.0.1:0", "-tls-cert-file", cert, "-tls-key-file", key)
	addr := tlsAddr(t, p)
	ctx := ctxT(t, time.Minute)

	tc := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: ca.pool(), ServerName: "127.0.0.1"}, MaxRetries: -1})
	t.Cleanup(func() { tc.Close() })
	if err := lockCycle(ctx, tc, "tls:k", "t", time.Minute); err != nil {
		t.Fatalf("go-redis over TLS: %v", err)
	}
	if err := lockCycle(ctx, client(t, p.Addr), "tls:k", "t", time.Minute); err != nil {
		t.Fatalf("the plain port next to TLS: %v", err)
	}

	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.CommandContext(ctx, "redis-cli", "--tls", "--cacert", ca.caFile, "-h", host, "-p", port, "SET", "cli", "t", "NX", "PX", "60000").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "OK" {
		t.Fatalf("redis-cli --tls: %v %q", err, out)
	}
	py := `import sys, redis
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]), ssl=True, ssl_ca_certs=sys.argv[3])
l = r.lock("py", timeout=10)
assert l.acquire(blocking=False), "acquire"
l.release()
print("ok")`
	out, err = exec.CommandContext(ctx, "/usr/bin/python3", "-c", py, host, port, ca.caFile).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("redis-py over TLS: %v\n%s", err, out)
	}

	// Wrong certificate: a client trusting another CA refuses the server.
	other := newPKI(t, "other")
	bad := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: other.pool(), ServerName: "127.0.0.1"}, MaxRetries: -1})
	t.Cleanup(func() { bad.Close() })
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client trusting another CA: %v; want a certificate error", err)
	}
	// Plain RESP on the TLS port is not served.
	raw := dialRaw(t, addr)
	if got := raw.do("PING"); got == "+PONG" {
		t.Fatal("the TLS port answered plain RESP")
	}
}

// TestMutualTLS: with a client CA, the TLS port serves clients presenting a
// certificate from it, and refuses clients with none or with one from
// another CA.
func TestMutualTLS(t *testing.T) {
	ca := newPKI(t, "proxy")
	cert, key := ca.issue(t, "server", true)
	ccert, ckey := ca.issue(t, "app", false)
	p := testproc.Proxy(t, "-tls-listen", "127.0.0.1:0", "-tls-cert-file", cert, "-tls-key-file", key, "-tls-ca-cert-file", ca.caFile)
	addr := tlsAddr(t, p)
	ctx := ctxT(t, time.Minute)
	dial := func(certFile, keyFile string) error {
		cfg := &tls.Config{RootCAs: ca.pool(), ServerName: "127.0.0.1"}
		if certFile != "" {
			kp, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
		c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: cfg, MaxRetries: -1})
		defer c.Close()
		return lockCycle(ctx, c, "tls:k", "t", time.Minute)
	}
	if err := dial(ccert, ckey); err != nil {
		t.Fatalf("client with a certificate from the CA: %v", err)
	}
	if err := dial("", ""); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	other := newPKI(t, "other")
	ocert, okey := other.issue(t, "intruder", false)
	if err := dial(ocert, okey); err == nil {
		t.Fatal("a client with a certificate from another CA was served")
	}
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.CommandContext(ctx, "redis-cli", "--tls", "--cacert", ca.caFile, "--cert", ccert, "--key", ckey, "-h", host, "-p", port, "PING").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "PONG" {
		t.Fatalf("redis-cli --tls with a client certificate: %v %q", err, out)
	}
}
