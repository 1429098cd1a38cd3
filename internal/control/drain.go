package control

import (
	"fmt"
	"sync"

	"github.com/jobplane/jobplane/internal/protocol"
)

// drainSignal is closed once when the server begins to stop. Its zero value
// is ready to use.
type drainSignal struct {
	mu     sync.Mutex
	ch     chan struct{}
	closed bool
}

func (d *drainSignal) c() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

func (d *drainSignal) close() {
	c := d.c()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(c)
	}
}

// Drain begins a graceful stop: open claim long-polls return at once with
// nothing (204), claims that arrive later are refused 503 unavailable so
// that runners go to another replica or come back, and log streams end
// (clients resume them with Last-Event-ID). Every other call is served as
// before, renewals and results above all, until the server stops.
func (s *Service) Drain() { s.drain.close() }

// Draining is closed once Drain was called: long-lived answers (log
// streams) select on it and end.
func (s *Service) Draining() <-chan struct{} { return s.drain.c() }

// refuseWhileDraining refuses a new claim on a stopping server.
func (s *Service) refuseWhileDraining() error {
	select {
	case <-s.drain.c():
		return fmt.Errorf("the server is shutting down; claim from another replica or retry: %w", protocol.ErrUnavailable)
	default:
		return nil
	}
}
