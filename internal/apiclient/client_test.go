package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
)

func TestClientRequestsAndProblems(t *testing.T) {
	t.Parallel()
	type seen struct{ method, uri, auth, body string }
	var mu sync.Mutex
	var got []seen
	// The answers are a broken server's on purpose; the requests must
	// still be the document's.
	ts := httptest.NewServer(openapitest.Requests(t, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.RequestURI, r.Header.Get("Authorization"), string(b)})
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/runs":
			if r.Method == http.MethodPost {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = io.WriteString(w, `{"type":"about:blank","title":"Invalid parameters","status":422,"code":"invalid_params","detail":"account is required","field":"account"}`)
				return
			}
			_, _ = io.WriteString(w, `{"runs":[{"id":"run_1","state":"queued"}],"next_cursor":"c2"}`)
		case "/v1/runs/run_a b/cancel":
			_, _ = io.WriteString(w, `{"id":"run_a b","state":"cancelling"}`)
		case "/v1/runners/rnr_1/disable":
		case "/healthz":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})))
	t.Cleanup(ts.Close)
	c := &Client{BaseURL: ts.URL, Token: "tok"}
	ctx := context.Background()

	_, err := c.CreateRun(ctx, &protocol.RunRequest{Job: "backfill", Channel: "prod", Params: json.RawMessage(`{"account":""}`)})
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 422, ae.Status)
	require.Equal(t, "account", ae.Problem.Field)
	require.Equal(t, "invalid_params: account is required", err.Error())
	require.True(t, IsCode(fmt.Errorf("wrapped: %w", err), protocol.CodeInvalidParams))
	require.False(t, Retryable(err))

	list, err := c.ListRuns(ctx, ListRunsParams{Job: "backfill", State: "queued", Limit: 5, Cursor: "c1"})
	require.NoError(t, err)
	require.Equal(t, "c2", list.NextCursor)
	require.Len(t, list.Runs, 1)

	run, err := c.CancelRun(ctx, "run_a b")
	require.NoError(t, err)
	require.Equal(t, "cancelling", run.State)
	require.NoError(t, c.DisableRunner(ctx, "rnr_1"))

	err = c.Health(ctx)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "http 502: <html>bad gateway</html>", err.Error())
	require.True(t, Retryable(err))

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, seen{"POST", "/v1/runs", "Bearer tok", `{"job":"backfill","channel":"prod","params":{"account":""}}`}, got[0])
	require.Equal(t, "/v1/runs?cursor=c1&job=backfill&limit=5&state=queued", got[1].uri)
	require.Equal(t, "/v1/runs/run_a%20b/cancel", got[2].uri)
}

func TestRetryableTransport(t *testing.T) {
	t.Parallel()
	c := &Client{BaseURL: "http://127.0.0.1:1"} // nothing listens on port 1
	err := c.Health(context.Background())
	require.Error(t, err)
	require.True(t, Retryable(err), "err = %v", err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = c.Health(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, Retryable(err))
}

// TestFollowLogsReconnects drops the stream mid-way and resends a line on
// the reconnect: the caller must see every line exactly once, in order.
func TestFollowLogsReconnects(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var afters []string
	ts := httptest.NewServer(openapitest.Requests(t, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "true", r.URL.Query().Get("follow"))
		mu.Lock()
		afters = append(afters, r.URL.Query().Get("after"))
		n := len(afters)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		line := func(id int) {
			fmt.Fprintf(w, "event: line\nid: %d\ndata: {\"id\":%d,\"attempt_id\":\"att_1\",\"stream\":\"stdout\",\"text\":\"line %d\"}\n\n", id, id, id)
		}
		switch n {
		case 1:
			_, _ = io.WriteString(w, ": keep-alive\n\n")
			line(3)
			line(4)
			// Half an event, then the connection drops.
			_, _ = io.WriteString(w, "event: line\ndata: {\"id\":5,")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case 2:
			line(4) // already delivered
			line(5)
			_, _ = io.WriteString(w, "event: end\ndata: {\"run_state\":\"succeeded\"}\n\n")
		default:
			line(5)
		}
	})))
	t.Cleanup(ts.Close)
	c := &Client{BaseURL: ts.URL, Token: "tok"}
	var ids []int64
	state, err := c.FollowLogs(context.Background(), "run_1", 2, func(l protocol.RunLogLine) error {
		ids = append(ids, l.ID)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "succeeded", state)
	require.Equal(t, []int64{3, 4, 5}, ids)
	mu.Lock()
	require.Equal(t, []string{"2", "4"}, afters)
	mu.Unlock()

	// An error from the callback ends the stream and comes back unchanged.
	stop := errors.New("stop")
	_, err = (&Client{BaseURL: ts.URL, Token: "tok"}).FollowLogs(context.Background(), "run_1", 4, func(protocol.RunLogLine) error { return stop })
	require.ErrorIs(t, err, stop)
}
