package worker

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
)

// resultSender posts results. A result with no other call of its kind in
// flight is sent at once, alone, as before. The results of attempts that
// end while a call is in flight wait for it to return and then go together
// in one POST /v1/runner/results: a burst of short jobs costs the server
// one signed call, one nonce and one commit for their results instead of
// one of each per attempt, and no result waits on a timer. A server that
// does not know the route (404) gets one call per result from then on.
type resultSender struct {
	rc *apiclient.RunnerClient

	mu      sync.Mutex
	sending bool
	single  bool
	queue   []*pendingResult
}

type pendingResult struct {
	ctx   context.Context
	item  apiclient.ResultItem
	done  chan struct{}
	state string
	err   error
}

func (p *pendingResult) finish(state string, err error) {
	p.state, p.err = state, err
	close(p.done)
}

// send posts one attempt's result and returns the run's state, or the
// refusal of this result (an *apiclient.APIError, as Result returns it).
func (s *resultSender) send(ctx context.Context, ref apiclient.AttemptRef, req protocol.ResultRequest) (string, error) {
	p := &pendingResult{ctx: ctx, item: apiclient.ResultItem{Ref: ref, Result: req}, done: make(chan struct{})}
	s.mu.Lock()
	s.queue = append(s.queue, p)
	if !s.sending {
		s.sending = true
		go s.drain()
	}
	s.mu.Unlock()
	select {
	case <-p.done:
		return p.state, p.err
	case <-ctx.Done():
		// A call carrying it may still be in flight: the caller retries as
		// after any lost answer, and a result recorded twice is acknowledged.
		return "", ctx.Err()
	}
}

// drain sends what is queued until nothing is.
func (s *resultSender) drain() {
	for {
		s.mu.Lock()
		live := s.queue[:0]
		for _, p := range s.queue {
			if err := p.ctx.Err(); err != nil {
				p.finish("", err)
				continue
			}
			live = append(live, p)
		}
		if len(live) == 0 {
			s.queue, s.sending = nil, false
			s.mu.Unlock()
			return
		}
		n := len(live)
		if s.single {
			n = 1
		}
		n = min(n, protocol.MaxResultsBatch)
		batch := append([]*pendingResult(nil), live[:n]...)
		s.queue = append([]*pendingResult(nil), live[n:]...)
		s.mu.Unlock()
		if len(batch) == 1 {
			p := batch[0]
			resp, err := s.rc.Result(p.ctx, p.item.Ref, p.item.Result)
			if err != nil {
				p.finish("", err)
			} else {
				p.finish(resp.RunState, nil)
			}
			continue
		}
		s.sendBatch(batch)
	}
}

func (s *resultSender) sendBatch(batch []*pendingResult) {
	items := make([]apiclient.ResultItem, len(batch))
	// The call lives as long as the most patient of its callers allows
	// and is not cut short by one of them giving up: each waits on its own
	// context anyway.
	var deadline time.Time
	for i, p := range batch {
		items[i] = p.item
		if d, ok := p.ctx.Deadline(); ok && (deadline.IsZero() || d.After(deadline)) {
			deadline = d
		}
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	answers, err := s.rc.Results(ctx, items)
	if err != nil && apiclient.StatusOf(err) == http.StatusNotFound && apiclient.IsCode(err, protocol.CodeNotFound) {
		// A server that predates the route: nothing was recorded.
		s.mu.Lock()
		s.single = true
		s.queue = append(batch, s.queue...)
		s.mu.Unlock()
		return
	}
	for i, p := range batch {
		switch {
		case err != nil:
			p.finish("", err)
		case answers[i].Err != nil:
			p.finish("", answers[i].Err)
		default:
			p.finish(answers[i].RunState, nil)
		}
	}
}
