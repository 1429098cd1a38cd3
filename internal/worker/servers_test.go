package worker

import (
	"context"
	"crypto/ed25519"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

// TestResolveServersFailsOverAmongAddresses: a server name that resolves
// to two addresses is two servers; with nothing listening at the first,
// calls reach the replica at the second, under the name's URL.
func TestResolveServersFailsOverAmongAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 loopback: %v", err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	var hosts atomic.Value
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		hosts.Store(r.Host)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"server_time":"2027-01-01T00:00:00Z","status":"active","cancel_attempts":[]}`)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	old := lookupHost
	lookupHost = func(_ context.Context, host string) ([]string, error) {
		require.Equal(t, "replicas.test", host)
		return []string{"127.0.0.1", "127.0.0.2"}, nil
	}
	t.Cleanup(func() { lookupHost = old })

	url := "http://replicas.test:" + port
	w, err := New(Config{Server: url, StateDir: t.TempDir()})
	require.NoError(t, err)
	w.resolveServers(context.Background())
	require.Len(t, w.rc.Servers, 2)
	_, priv, _ := ed25519.GenerateKey(nil)
	w.rc.RunnerID, w.rc.Key = "rnr_1", priv
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = w.rc.Heartbeat(ctx, protocol.HeartbeatRequest{Status: "idle"})
	require.NoError(t, err)
	require.Equal(t, "replicas.test:"+port, hosts.Load(), "the request keeps the name")
	require.Equal(t, url, w.rc.Current().URL)
	require.Same(t, w.rc.Servers[1].HTTP, w.rc.Current().HTTP, "the second address is current")
}
