package claimline

import (
	"slices"
	"sync"
)

// Waiter is one claim waiting in a line.
type Waiter struct {
	poke   chan struct{} // buffered: "look now"
	trying bool
}

// Poked is signalled when the waiter should look again.
func (w *Waiter) Poked() <-chan struct{} { return w.poke }

// Lines are the lines of one server; the zero value is ready.
type Lines struct {
	mu    sync.Mutex
	lines map[string][]*Waiter
}

// Join puts a new waiter at the end of scope's line, as looking.
func (d *Lines) Join(scope string) *Waiter {
	w := &Waiter{poke: make(chan struct{}, 1), trying: true}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lines == nil {
		d.lines = map[string][]*Waiter{}
	}
	d.lines[scope] = append(d.lines[scope], w)
	return w
}

// Leave removes w; a new head is poked so that it starts watching.
func (d *Lines) Leave(scope string, w *Waiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	line := d.lines[scope]
	i := slices.Index(line, w)
	if i < 0 {
		return
	}
	line = slices.Delete(line, i, i+1)
	if len(line) == 0 {
		delete(d.lines, scope)
		return
	}
	d.lines[scope] = line
	if i == 0 {
		pokeLocked(line[0])
	}
}

// SetTrying says whether w is looking now (a waiter looking is not poked).
func (d *Lines) SetTrying(w *Waiter, v bool) {
	d.mu.Lock()
	w.trying = v
	d.mu.Unlock()
}

// IsHead reports whether w heads scope's line: only the head watches.
func (d *Lines) IsHead(scope string, w *Waiter) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	line := d.lines[scope]
	return len(line) > 0 && line[0] == w
}

// PokeNext pokes the first n waiters of the line that are not already
// looking.
func (d *Lines) PokeNext(scope string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.lines[scope] {
		if n == 0 {
			return
		}
		if !w.trying {
			pokeLocked(w)
			n--
		}
	}
}

func pokeLocked(w *Waiter) {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Waiting reports how many claims wait in all lines.
func (d *Lines) Waiting() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, l := range d.lines {
		n += len(l)
	}
	return n
}
