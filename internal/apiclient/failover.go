package apiclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Server is one server a RunnerClient may call: its base URL and the HTTP
// client that reaches it (nil: RunnerClient.HTTP). A host name that
// resolves to several replicas is one Server per address, each with a
// client that dials its address and keeps the name for TLS and Host.
type Server struct {
	URL  string
	HTTP *http.Client
}

// failover is a RunnerClient's choice among its servers. Every call goes
// to the current server; a call that finds it unreachable or unavailable
// (transport failure, 502, 503, 504) marks it down and is sent again, as a
// new signed request, to the next one, which becomes current. Marking a
// server down also abandons every other request in flight to it, so a
// long-poll claim stuck on a dead server does not hold the worker there
// while its renewals have already moved on.
type failover struct {
	mu   sync.Mutex
	cur  int
	gone map[int]chan struct{} // closed when the server is marked down
}

// servers returns the client's servers in configuration order.
func (c *RunnerClient) servers() []Server {
	if len(c.Servers) > 0 {
		return c.Servers
	}
	return []Server{{URL: c.BaseURL, HTTP: c.HTTP}}
}

// Current is the server calls go to now.
func (c *RunnerClient) Current() Server {
	s := c.servers()
	cur := s[c.fo.current(len(s))]
	if cur.HTTP == nil {
		cur.HTTP = c.HTTP
	}
	return cur
}

// watch returns server k's down signal.
func (f *failover) watch(k int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone == nil {
		f.gone = map[int]chan struct{}{}
	}
	ch := f.gone[k]
	if ch == nil {
		ch = make(chan struct{})
		f.gone[k] = ch
	}
	return ch
}

func (f *failover) current(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur % n
}

// down marks server k of n down: its in-flight requests are abandoned and,
// if it was current, the next server becomes current.
func (f *failover) down(k, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch := f.gone[k]; ch != nil {
		close(ch)
		delete(f.gone, k)
	}
	if f.cur%n == k {
		f.cur = (k + 1) % n
	}
}

// up makes server k current: it just answered.
func (f *failover) up(k int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = k
}

// errAbandoned ends a request to a server another call found down.
var errAbandoned = errors.New("abandoned: another call found this server down")

// shouldFailOver reports whether err, from a call whose own context is
// still live, says the server could not serve it: the same request may
// then go to another server. 500 and the 4xx are the request's own answer.
func shouldFailOver(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusBadGateway || ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusGatewayTimeout
	}
	return Retryable(err)
}

// onServers runs try against the current server and fails over to the
// others in turn. With a deadline on ctx, each try gets an equal share of
// what is left of it, so a server that does not answer at all (a dropped
// network) cannot use up a renewal's whole time.
func (c *RunnerClient) onServers(ctx context.Context, try func(ctx context.Context, s Server) (int, error)) (int, error) {
	srv := c.servers()
	n := len(srv)
	if n == 1 {
		return try(ctx, srv[0])
	}
	start := c.fo.current(n)
	var (
		status int
		err    error
	)
	for i := range n {
		k := (start + i) % n
		tctx, cancel := context.WithCancelCause(ctx)
		if d, ok := ctx.Deadline(); ok && i < n-1 {
			var stopTimer context.CancelFunc
			tctx, stopTimer = context.WithTimeout(tctx, time.Until(d)/time.Duration(n-i))
			defer stopTimer()
		}
		gone := c.fo.watch(k)
		stop := make(chan struct{})
		go func() {
			select {
			case <-gone:
				cancel(errAbandoned)
			case <-stop:
			}
		}()
		status, err = try(tctx, srv[k])
		close(stop)
		cause := context.Cause(tctx)
		cancel(nil)
		if err == nil {
			c.fo.up(k)
			return status, nil
		}
		if ctx.Err() != nil {
			return status, err
		}
		if cause != nil {
			// This try's own share ran out or the server was abandoned:
			// not the caller's cancellation, so a retryable failure.
			err = &transportError{err: fmt.Errorf("server %s: %v", srv[k].URL, err)}
		}
		if !shouldFailOver(err) {
			return status, err
		}
		c.fo.down(k, n)
		if c.OnFailover != nil {
			c.OnFailover(srv[k].URL, srv[(k+1)%n].URL, err)
		}
	}
	return status, err
}
