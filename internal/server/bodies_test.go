package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/server"
)

// rawRequest writes head and then body (at most limit bytes of it, as fast
// as the server reads or one byte per pace), and returns the status line
// and how many body bytes the server took before it answered or closed.
func rawRequest(t *testing.T, addr, head string, body io.Reader, pace time.Duration) (status string, sent int64, took time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	_, err = io.WriteString(conn, head)
	require.NoError(t, err)
	var n atomic.Int64
	go func() {
		buf := make([]byte, 32<<10)
		if pace > 0 {
			buf = buf[:1]
		}
		for {
			k, err := body.Read(buf)
			if k > 0 {
				if _, werr := conn.Write(buf[:k]); werr != nil {
					return
				}
				n.Add(int64(k))
			}
			if err != nil {
				return
			}
			if pace > 0 {
				time.Sleep(pace)
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	took = time.Since(start)
	if err != nil {
		return "closed: " + err.Error(), n.Load(), took
	}
	return strings.TrimSpace(line), n.Load(), took
}

// chunkedBody is r in HTTP/1.1 chunked encoding; close it to stop.
func chunkedBody(r io.Reader) *io.PipeReader {
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			k, err := r.Read(buf)
			if k > 0 {
				if _, werr := fmt.Fprintf(pw, "%x\r\n%s\r\n", k, buf[:k]); werr != nil {
					return
				}
			}
			if err != nil {
				_, _ = io.WriteString(pw, "0\r\n\r\n")
				pw.Close()
				return
			}
		}
	}()
	return pr
}

// endless is an unending body of one byte.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

// TestBodyLimitsAndReadTimeouts: every route bounds what it reads of a
// body and for how long, before its handler reads it: a 200 MiB multipart
// form to the UI is refused unread when declared and after about 1 MiB when
// chunked; a body sent at one byte per pace is cut on signed, sign-in and
// registration routes.
func TestBodyLimitsAndReadTimeouts(t *testing.T) {
	defer server.SetBodyReadTimeout(2 * time.Second)()
	srv, _, _ := startObsServer(t, "sqlite:"+filepath.Join(t.TempDir(), "db.sqlite"))
	addr := strings.TrimPrefix(srv.URL(), "http://")
	const big = 200 << 20

	// Declared: refused 413 before a byte of the body is read.
	status, _, _ := rawRequest(t, addr, fmt.Sprintf("POST /signin HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n", big), strings.NewReader(""), 0)
	require.Contains(t, status, "413", status)
	status, _, _ = rawRequest(t, addr, fmt.Sprintf("POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", big), strings.NewReader(""), 0)
	require.Contains(t, status, "413", status)

	// Chunked: the server stops reading about a MiB in.
	for _, path := range []string{"/signin", "/runs/run_1/cancel", "/v1/runs"} {
		pr := chunkedBody(io.MultiReader(strings.NewReader("--b\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n"), io.LimitReader(endless('a'), big)))
		status, sent, _ := rawRequest(t, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+obsToken+"\r\nContent-Type: multipart/form-data; boundary=b\r\nTransfer-Encoding: chunked\r\n\r\n", pr, 0)
		pr.Close()
		require.NotContains(t, status, " 200 ", status)
		require.Less(t, sent, int64(32<<20), "%s: the server read %d bytes of a 200 MiB form", path, sent)
		t.Logf("%s: %s after %d bytes", path, status, sent)
	}

	// One byte a second: cut after the read timeout (2 s here), not
	// served to the end (60 bytes would take a minute), and answered 408
	// request_timeout on every route alike (the UI's forms too).
	for _, path := range []string{"/v1/runner/claim", "/signin", "/v1/runner/register", "/v1/runs"} {
		head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 60\r\n\r\n", path, obsToken)
		status, sent, took := rawRequest(t, addr, head, io.LimitReader(endless('a'), 60), time.Second)
		require.Less(t, took, 30*time.Second, "%s: %s after %d bytes", path, status, sent)
		require.Less(t, sent, int64(60), "%s: the server waited for the whole slow body (%s)", path, status)
		require.Contains(t, status, " 408 ", "%s: a body too slow is 408 Request Timeout", path)
		t.Logf("%s: %s after %d bytes in %s", path, status, sent, took.Round(time.Millisecond))
	}
}
