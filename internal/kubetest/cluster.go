package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/toolcache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// EnvRequire set to 1 turns a missing control plane into a failure (CI).
	EnvRequire = "JOBPLANE_TEST_REQUIRE_KUBE"
	// EnvDir names a directory holding the binaries instead of the cache.
	EnvDir = "JOBPLANE_TEST_KUBE_DIR"
)

// Binaries the tools module builds; etcd's main package is the module
// go.etcd.io/etcd/server/v3, which go build names "server".
var binaries = map[string]string{
	"apiserver":  "kube-apiserver",
	"controller": "kube-controller-manager",
	"scheduler":  "kube-scheduler",
	"etcd":       "server",
}

// Users are the static-token users every cluster knows besides the
// administrator; tests bind them to roles (they have no rights otherwise).
var Users = []string{"jobplane-worker-a", "jobplane-worker-b", "jobplane-worker-c"}

// ToolsDir finds tools/kube above the working directory.
func ToolsDir() (string, error) { return toolcache.ToolsDir("kube") }

// BinaryDir is where the binaries of the tools module are cached:
// $XDG_CACHE_HOME (or ~/.cache)/jobplane/kube-HASH, HASH naming the module's
// go.mod and go.sum, so that a version change builds anew and .ci/run
// computes the same path.
func BinaryDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	tools, err := ToolsDir()
	if err != nil {
		return "", err
	}
	return toolcache.Dir(tools, "kube")
}

// Unavailable skips t, or fails it under JOBPLANE_TEST_REQUIRE_KUBE=1.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("kubetest: %s (%s=1)", why, EnvRequire)
	}
	t.Skipf("kubetest: %s", why)
}

// Cluster is a running control plane.
type Cluster struct {
	// URL is the API server's address.
	URL    string
	dir    string
	tokens map[string]string
}

// Start starts etcd, the API server, the controller manager and the
// scheduler, all stopped when t ends. It skips t (see Unavailable) when the
// binaries are not built.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin, err := BinaryDir()
	if err != nil {
		Unavailable(t, err.Error())
	}
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			Unavailable(t, fmt.Sprintf("no %s in %s; build tools/kube once as its package documentation says", b, bin))
		}
	}
	dir := t.TempDir()
	c := &Cluster{dir: dir, tokens: map[string]string{}}

	// Static tokens: the administrator (system:masters, also used by the
	// controller manager and the scheduler) and the test users.
	var lines []string
	c.tokens["admin"] = randomHex()
	lines = append(lines, fmt.Sprintf("%s,admin,admin,system:masters", c.tokens["admin"]))
	for _, u := range Users {
		c.tokens[u] = randomHex()
		lines = append(lines, fmt.Sprintf("%s,%s,%s", c.tokens[u], u, u))
	}
	write(t, filepath.Join(dir, "tokens.csv"), strings.Join(lines, "\n")+"\n")
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sa.key"), string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)})))

	etcdClient, etcdPeer, apiPort := freePort(t), freePort(t), freePort(t)
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	start(t, dir, "etcd", filepath.Join(bin, binaries["etcd"]),
		"--name", "kubetest", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-cluster", fmt.Sprintf("kubetest=http://127.0.0.1:%d", etcdPeer),
		"--unsafe-no-fsync", "--log-level", "warn")
	start(t, dir, "apiserver", filepath.Join(bin, binaries["apiserver"]),
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		// Loopback only; the kubernetes Service's endpoints (which may not be
		// loopback) are not kept.
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
		"--secure-port", fmt.Sprint(apiPort), "--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/24",
		"--kubelet-preferred-address-types", "InternalIP",
		"--allow-privileged=false")
	if err := c.waitReady(3 * time.Minute); err != nil {
		dumpLogs(t, dir)
		t.Fatalf("kubetest: API server not ready: %v", err)
	}
	kubeconfig := c.Kubeconfig(t, "admin")
	start(t, dir, "controller", filepath.Join(bin, binaries["controller"]),
		"--kubeconfig", kubeconfig, "--leader-elect=false", "--secure-port=0",
		// The Deployment and ReplicaSet controllers run the shipped worker's
		// Deployment; the root CA publisher gives every namespace the
		// kube-root-ca.crt ConfigMap that a pod's service account volume
		// projects as ca.crt (the API server's self-signed certificate).
		"--controllers", "job-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,"+
			"deployment-controller,replicaset-controller,root-ca-certificate-publisher-controller",
		"--root-ca-file", filepath.Join(dir, "certs", "apiserver.crt"),
		"--concurrent-gc-syncs", "5")
	start(t, dir, "scheduler", filepath.Join(bin, binaries["scheduler"]),
		"--kubeconfig", kubeconfig, "--leader-elect=false", "--secure-port=0")
	return c
}

// Kubeconfig writes a kubeconfig file for user (a name of Users, or
// "admin") and returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, user string) string {
	t.Helper()
	p := filepath.Join(c.dir, user+".kubeconfig")
	write(t, p, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: %s
  user: {token: %q}
contexts:
- name: kubetest
  context: {cluster: kubetest, user: %s}
current-context: kubetest
`, c.URL, user, c.tokens[user], user))
	return p
}

// Config is a client configuration for user (a name of Users, or "admin").
func (c *Cluster) Config(user string) *rest.Config {
	return &rest.Config{
		Host: c.URL, BearerToken: c.tokens[user],
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             50, Burst: 100,
	}
}

// Client is a client for user.
func (c *Cluster) Client(t testing.TB, user string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config(user))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Logs returns the control plane's logs (for a failing test).
func (c *Cluster) Logs() string {
	var b strings.Builder
	for name := range binaries {
		out, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
		s := string(out)
		if len(s) > 4000 {
			s = s[len(s)-4000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", name, s)
	}
	return b.String()
}

func (c *Cluster) waitReady(limit time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	end := wall.Now().Add(limit)
	var last error
	for wall.Now().Before(end) {
		req, _ := http.NewRequest("GET", c.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.tokens["admin"])
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			err = fmt.Errorf("/readyz: %s", resp.Status)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// start runs a control-plane binary with its output in dir/name.log, killed
// (with its process group) when t ends.
func start(t testing.TB, dir, name, path string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("kubetest: start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logf.Close()
	})
}

func dumpLogs(t testing.TB, dir string) {
	t.Helper()
	for name := range binaries {
		out, _ := os.ReadFile(filepath.Join(dir, name+".log"))
		s := string(out)
		if len(s) > 3000 {
			s = s[len(s)-3000:]
		}
		t.Logf("kubetest: %s log:\n%s", name, s)
	}
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// selfSigned is a TLS certificate for 127.0.0.1, for the node's kubelet
// endpoint (the API server does not verify it without
// --kubelet-certificate-authority).
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: wall.Now().Add(-time.Hour), NotAfter: wall.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Ctx is a context bounded by d, canceled when t ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// wall is the real clock: the harness waits on real processes
var wall clock.Clock = clock.Real{}
