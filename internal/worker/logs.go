package worker

import (
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
)

const (
	// maxChunkLines and maxChunkBytes bound one LogsRequest. Text can grow
	// up to 6× when JSON-escaped, and a request must stay under the
	// server's 1 MiB body limit.
	maxChunkLines = 500
	maxChunkBytes = 128 << 10
	// maxPendingBytes is how much output may wait for the server before the
	// job's writes block (the pipe applies back-pressure).
	maxPendingBytes = 8 << 20
)

// shipper batches an attempt's log lines and sends them in order, each chunk
// with its own seq, retried with the same seq until accepted.
type shipper struct {
	now   func() time.Time
	send  func(protocol.LogsRequest) bool // false: drop everything from now on
	every time.Duration

	mu       sync.Mutex
	cond     *sync.Cond
	pending  []protocol.LogLine
	bytes    int
	closed   bool
	dropping bool
	seq      int64
	// holdLast: at close, the final chunk is kept in last for the caller
	// to send with the result instead of on its own.
	holdLast bool
	last     *protocol.LogsRequest
	// holding keeps a partial chunk queued until close: the lines that
	// remain once the process ended go with the result, even when a tick
	// comes between them and the result.
	holding bool

	kick chan struct{}
	done chan struct{}
}

func newShipper(now func() time.Time, every time.Duration, send func(protocol.LogsRequest) bool) *shipper {
	s := &shipper{now: now, send: send, every: every, kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.loop()
	return s
}

// add queues a line, blocking while too much output waits for the server.
func (s *shipper) add(stream, text string) {
	s.mu.Lock()
	for s.bytes >= maxPendingBytes && !s.dropping && !s.closed {
		s.cond.Wait()
	}
	if s.dropping || s.closed {
		s.mu.Unlock()
		return
	}
	s.pending = append(s.pending, protocol.LogLine{At: s.now().UTC(), Stream: stream, Text: text})
	s.bytes += len(text)
	full := len(s.pending) >= maxChunkLines || s.bytes >= maxChunkBytes
	s.mu.Unlock()
	if full {
		s.poke()
	}
}

func (s *shipper) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// close flushes what is queued and waits until it is sent or dropped.
func (s *shipper) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.poke()
	<-s.done
}

// closeKeepingLast is close, except that the final chunk is returned (nil
// when there is none) instead of sent: the result carries it, one request
// fewer per attempt.
func (s *shipper) closeKeepingLast() *protocol.LogsRequest {
	s.mu.Lock()
	s.holdLast = true
	s.mu.Unlock()
	s.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropping {
		return nil
	}
	return s.last
}

// hold keeps what is queued from now on (unless a chunk fills up) for
// closeKeepingLast, instead of sending it at the next tick.
func (s *shipper) hold() {
	s.mu.Lock()
	s.holding = true
	s.mu.Unlock()
}

// drop discards queued and future lines: the lease is gone.
func (s *shipper) drop() {
	s.mu.Lock()
	s.dropping = true
	s.pending, s.bytes = nil, 0
	s.cond.Broadcast()
	s.mu.Unlock()
}

// next takes one chunk off the queue; final reports that it is the last
// one of a closed shipper that holds its last chunk back.
func (s *shipper) next() (chunk []protocol.LogLine, finished, final bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropping || len(s.pending) == 0 {
		return nil, s.closed || s.dropping, false
	}
	if s.holding && !s.closed && len(s.pending) < maxChunkLines && s.bytes < maxChunkBytes {
		return nil, false, false
	}
	n, size := 0, 0
	for n < len(s.pending) && n < maxChunkLines && (n == 0 || size+len(s.pending[n].Text) <= maxChunkBytes) {
		size += len(s.pending[n].Text)
		n++
	}
	chunk = append([]protocol.LogLine(nil), s.pending[:n]...)
	s.pending = s.pending[n:]
	s.bytes -= size
	s.cond.Broadcast()
	return chunk, false, s.closed && s.holdLast && len(s.pending) == 0
}

func (s *shipper) loop() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-s.kick:
		case <-t.C:
		}
		for {
			chunk, finished, final := s.next()
			if chunk == nil {
				if finished {
					return
				}
				break
			}
			s.seq++
			if final {
				s.mu.Lock()
				s.last = &protocol.LogsRequest{Seq: s.seq, Lines: chunk}
				s.mu.Unlock()
				continue
			}
			if !s.send(protocol.LogsRequest{Seq: s.seq, Lines: chunk}) {
				s.drop()
			}
		}
	}
}
