package supervise

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
)

// leaseSource is where -lease-poll asks: the job's own API address, run
// token and attempt, from the job's environment.
type leaseSource struct {
	api, token, attempt string
}

// leaseSourceOf reads the lease source from env.
func leaseSourceOf(env []string) (leaseSource, error) {
	var s leaseSource
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case protocol.EnvAPI:
			s.api = v
		case protocol.EnvRunToken:
			s.token = v
		case protocol.EnvAttemptID:
			s.attempt = v
		}
	}
	if s.api == "" || s.token == "" || s.attempt == "" {
		return s, errors.New("-lease-poll needs " + protocol.EnvAPI + ", " + protocol.EnvRunToken + " and " +
			protocol.EnvAttemptID + " in the job's environment")
	}
	return s, nil
}

// leaseMargin is how long before the server's expiry the supervisor's
// bound falls: the worker's own margin, max(1 s, TTL/10), so that the job
// is gone by the time another runner may claim the attempt's retry.
func leaseMargin(ttl time.Duration) time.Duration {
	return max(time.Second, ttl/10)
}

// pollInterval is the pause between polls: a quarter of the TTL, between
// 500 ms and 10 s, so that a renewal is seen long before the bound it moves.
func pollInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 500*time.Millisecond), 10*time.Second)
}

// leaseAnswer is one poll's outcome.
type leaseAnswer struct {
	// until is the bound the answer allows (zero when none).
	until time.Time
	// ttl is the lease's TTL.
	ttl time.Duration
	// ended: the server said the attempt no longer holds its lease.
	ended bool
	// refused: the server refused the question (a 4xx other than 410):
	// asking again will not confirm the lease.
	refused bool
	err     error
}

// ask polls once. The bound counts from before the request was sent, so a
// slow answer only makes it earlier.
func (s leaseSource) ask(ctx context.Context, hc *http.Client) leaseAnswer {
	sent := wall.Now()
	c := &apiclient.Client{BaseURL: s.api, Token: s.token, HTTP: hc}
	l, err := c.RunLease(ctx, s.attempt)
	switch {
	case apiclient.IsCode(err, protocol.CodeAttemptEnded):
		return leaseAnswer{ended: true, err: err}
	case err != nil:
		var ae *apiclient.APIError
		return leaseAnswer{err: err, refused: errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500}
	case l.AttemptID != s.attempt || l.RemainingMS <= 0:
		return leaseAnswer{ended: true, err: errors.New("the server's answer is of no live lease of this attempt")}
	}
	ttl := time.Duration(l.TTLSeconds) * time.Second
	return leaseAnswer{until: sent.Add(time.Duration(l.RemainingMS)*time.Millisecond - leaseMargin(ttl)), ttl: ttl}
}

// pollLease asks every interval (or the lease's pollInterval when interval
// is 0) and sends each answer to out until stop is closed.
func (s leaseSource) pollLease(interval time.Duration, ttl time.Duration, out chan<- leaseAnswer, stop <-chan struct{}) {
	hc := &http.Client{Timeout: 10 * time.Second}
	for {
		every := interval
		if every <= 0 {
			every = pollInterval(ttl)
		}
		select {
		case <-stop:
			return
		case <-time.After(every):
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(every, 10*time.Second)+time.Second)
		a := s.ask(ctx, hc)
		cancel()
		if a.ttl > 0 {
			ttl = a.ttl
		}
		select {
		case out <- a:
		case <-stop:
			return
		}
	}
}
