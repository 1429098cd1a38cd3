package store

import "sync"

// WakeSignal is a store's Wake channel: closed at each Broadcast and
// replaced by a fresh one. The zero value is ready to use.
type WakeSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wake returns the channel the next Broadcast closes.
func (w *WakeSignal) Wake() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// Broadcast wakes every waiter of the current channel.
func (w *WakeSignal) Broadcast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
	}
	w.ch = make(chan struct{})
}
