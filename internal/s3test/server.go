package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Region is the region every test server answers for (SeaweedFS accepts
// any; signatures still name it).
const Region = "us-east-1"

// startTimeout bounds how long a server may take to answer S3 requests; it
// took about 4 s here, longer on a loaded machine.
const startTimeout = 90 * time.Second

// Server is one running SeaweedFS with its S3 gateway on loopback.
type Server struct {
	// Endpoint is the S3 gateway's URL (http://127.0.0.1:PORT).
	Endpoint string
	// AccessKey and SecretKey are the one identity the gateway accepts.
	AccessKey, SecretKey string

	bin   string
	dir   string
	ports []int
	log   *os.File

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	http *http.Client
}

// Start starts a server of the test's own, stopped when the test ends. Use
// it for fault tests (Stop, Restart); other tests share one with Shared.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := start(binary(t), t.TempDir())
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

var shared struct {
	once sync.Once
	s    *Server
	dir  string
	err  error
}

// Shared returns the test binary's shared server, started on first use.
// A package that uses it calls Stop from its TestMain (see Main); the
// server also dies with the test binary if that is killed.
func Shared(t testing.TB) *Server {
	t.Helper()
	bin := binary(t)
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "jobplane-s3test-")
		if shared.err == nil {
			shared.s, shared.err = start(bin, shared.dir)
		}
	})
	if shared.err != nil {
		t.Fatalf("s3test: %v", shared.err)
	}
	return shared.s
}

// Optional is Shared for a test that has more to check than its S3 part:
// without a server it logs why and returns nil (and fails under
// EnvRequire), so the caller runs the rest.
func Optional(t testing.TB) *Server {
	t.Helper()
	if _, err := findBinary(t); err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("s3test: %v (%s=1)", err, EnvRequire)
		}
		t.Logf("s3test: S3 part not run: %v", err)
		return nil
	}
	return Shared(t)
}

// Main runs a package's tests and then stops the shared server, if one
// was started; TestMain passes its result to os.Exit (after goleak).
func Main(m *testing.M) int {
	code := m.Run()
	if shared.s != nil {
		shared.s.Stop()
		os.RemoveAll(shared.dir)
	}
	return code
}

// Bucket creates a bucket of a fresh name and returns the name.
func (s *Server) Bucket(t testing.TB) string {
	t.Helper()
	name := "t-" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return name
}

// Client is an S3 client of the server's identity, with path-style
// addressing.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey}, nil
		}),
		HTTPClient: s.http,
		// SeaweedFS checks what it is sent; no trailing checksums needed.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s) and waits for it.
// Its data stays, so Restart brings the same objects back.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s.http.CloseIdleConnections()
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	s.http.CloseIdleConnections()
}

// Restart starts a stopped server again on the same ports and data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.run(); err != nil {
		t.Fatalf("s3test: restart: %v", err)
	}
}

// LogTail is the end of the server's own log, for failure messages.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(s.log.Name())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func start(bin, dir string) (*Server, error) {
	var lastErr error
	// A port found free can be taken before weed binds it; try again with
	// new ports then.
	for range 3 {
		s, err := newServer(bin, dir)
		if err != nil {
			return nil, err
		}
		if lastErr = s.run(); lastErr == nil {
			return s, nil
		}
		s.log.Close()
	}
	return nil, lastErr
}

func newServer(bin, dir string) (*Server, error) {
	ports, err := freePorts(8)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", ports[6]),
		AccessKey: "jobplane" + randomHex(6), SecretKey: randomHex(20),
		bin: bin, dir: dir, ports: ports,
		http: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}},
	}
	cfg, _ := json.Marshal(map[string]any{"identities": []any{map[string]any{
		"name":        "jobplane",
		"credentials": []any{map[string]string{"accessKey": s.AccessKey, "secretKey": s.SecretKey}},
		"actions":     []string{"Admin", "Read", "Write", "List", "Tagging"},
	}}})
	for _, sub := range []string{"data"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), cfg, 0o600); err != nil {
		return nil, err
	}
	// weed reads master.toml from its working directory: grow one volume
	// per new collection (bucket), not seven.
	if err := os.WriteFile(filepath.Join(dir, "master.toml"), []byte("[master.volume_growth]\ncopy_1 = 1\ncopy_other = 1\n"), 0o600); err != nil {
		return nil, err
	}
	s.log, err = os.OpenFile(filepath.Join(dir, "weed.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// args are weed's: every port explicit (each gRPC port too, so weed's
// "port + 10000" default never collides with another test's server), no
// optional listener that has a fixed default port, no telemetry.
func (s *Server) args() []string {
	p := func(i int) string { return strconv.Itoa(s.ports[i]) }
	return []string{"server",
		"-dir=" + filepath.Join(s.dir, "data"), "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + p(0), "-master.port.grpc=" + p(1),
		"-volume.port=" + p(2), "-volume.port.grpc=" + p(3),
		"-filer", "-filer.port=" + p(4), "-filer.port.grpc=" + p(5),
		"-filer.localSocket=" + filepath.Join(s.dir, "filer.sock"),
		"-s3", "-s3.port=" + p(6), "-s3.port.grpc=" + p(7),
		"-s3.localSocket=" + filepath.Join(s.dir, "s3.sock"),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.config=" + filepath.Join(s.dir, "s3.json"),
		"-master.telemetry=false",
		// Each bucket is a collection of its own, which grows volumes on its
		// first write (master.toml: one at a time); without room for them
		// that write fails with 500.
		"-master.volumeSizeLimitMB=32", "-volume.max=200",
		// A stop need not wait for clients to move away from the volume
		// server (10 s by default): there is only this one.
		"-volume.preStopSeconds=0",
		// One master: no peer to wait for before it leads again after a
		// restart (10 s by default, 30 s and more here).
		"-master.electionTimeout=1s",
	}
}

func (s *Server) run() error {
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// Its own process group, so Stop reaches every child; and it dies with
	// the test binary, so a killed test leaves no server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	if err := s.waitReady(done); err != nil {
		s.Kill()
		return fmt.Errorf("%w; weed log:\n%s", err, s.LogTail())
	}
	return nil
}

// waitReady polls until the gateway answers a signed ListBuckets: then the
// master, volume server and filer behind it are up as well.
func (s *Server) waitReady(done <-chan struct{}) error {
	wait, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c := s.Client()
	var err error
	for wait.Err() == nil {
		select {
		case <-done:
			return errors.New("weed exited during start")
		default:
		}
		ctx, cancel := context.WithTimeout(wait, 5*time.Second)
		_, err = c.ListBuckets(ctx, &s3.ListBucketsInput{})
		cancel()
		if err == nil {
			return s.probeWrite(wait, c)
		}
		sleep(wait, 200*time.Millisecond)
	}
	return fmt.Errorf("S3 gateway not ready after %s: %v", startTimeout, err)
}

// probeWrite writes one object: the gateway answers listings before the
// volume server has registered with the master, and writes fail until then.
func (s *Server) probeWrite(ctx context.Context, c *s3.Client) error {
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("probe")}); err != nil && !strings.Contains(err.Error(), "BucketAlready") {
		return fmt.Errorf("create probe bucket: %w", err)
	}
	var err error
	for ctx.Err() == nil {
		_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("probe"), Key: aws.String("probe"), Body: strings.NewReader("ok")})
		if err == nil {
			return nil
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("S3 gateway does not store objects: %v", err)
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
