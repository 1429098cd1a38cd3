package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
)

// drainer counts the HTTP requests in flight and marks a stopping server:
// while it drains, every answer closes its connection, so that clients
// open a new one (to another replica, or to this one until its listener
// closes) instead of sending on a connection the server is about to close.
type drainer struct {
	draining atomic.Bool
	inflight atomic.Int64

	// conns is every open connection with its state and when it entered
	// it (http.Server.ConnState), so that a stop closes a connection only
	// once its client has left it alone for quietFor.
	mu    sync.Mutex
	conns map[net.Conn]connState
}

type connState struct {
	state http.ConnState
	since time.Time
}

// quietFor is how long a connection must have sat idle before a stopping
// server closes it. Closing an idle keep-alive connection races with a
// client that is just sending on it: the client sees EOF and, for a POST,
// cannot know whether it was served. A client that is busy on a connection
// sends again within this time, gets an answer that closes the connection
// and reconnects (refused, and so safely retried); only connections left
// alone for this long are closed under their clients.
const quietFor = 250 * time.Millisecond

// track is the http.Server's ConnState hook. Wall time on purpose: it
// bounds a process's exit, it is not lease logic.
func (d *drainer) track(c net.Conn, st http.ConnState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conns == nil {
		d.conns = map[net.Conn]connState{}
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(d.conns, c)
	default:
		d.conns[c] = connState{state: st, since: clock.Real{}.Now()}
	}
}

// quiet says whether no request is in flight and every open connection
// has been idle (or new, with no request yet) for quietFor at now.
func (d *drainer) quiet(now time.Time) bool {
	if d.inflight.Load() > 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		if c.state == http.StateActive || now.Sub(c.since) < quietFor {
			return false
		}
	}
	return true
}

func (d *drainer) begin() { d.draining.Store(true) }

// wrap counts h's requests and closes connections while draining.
func (d *drainer) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.inflight.Add(1)
		defer d.inflight.Add(-1)
		if d.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// ready is /readyz's check: a draining server is not ready, so that a load
// balancer sends it nothing new.
func (d *drainer) ready(ping func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if d.draining.Load() {
			return fmt.Errorf("the server is shutting down: %w", protocol.ErrUnavailable)
		}
		return ping(ctx)
	}
}

// waitQuiet returns once no request is in flight and every connection
// still open has been idle for quietFor, or when ctx ends. The poll is real
// time: it bounds a process's exit, it is not lease logic.
func (d *drainer) waitQuiet(ctx context.Context) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !d.quiet(clock.Real{}.Now()) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// onceListener closes its listener once: Stop closes it before
// http.Server.Shutdown does, which must not then fail.
type onceListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}
