package apiclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
)

// followRetries bounds consecutive reconnects that deliver nothing, so that
// a server gone for good ends FollowLogs with an error instead of a hang.
const followRetries = 8

// followBackoff is the pause before reconnect n (0-based), capped at 5 s.
func followBackoff(n int) time.Duration {
	return min(250*time.Millisecond<<min(n, 5), 5*time.Second)
}

// callbackError marks an error returned by the caller's function, which ends
// FollowLogs at once.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// FollowLogs streams a run's log lines with IDs greater than after to fn, in
// order, until the run ends, and returns its final state. A dropped stream is
// reopened from the last line delivered, and lines the server sends again are
// skipped, so fn sees each line exactly once. An error from fn ends the
// stream and is returned as is.
func (c *Client) FollowLogs(ctx context.Context, runID string, after int64, fn func(protocol.RunLogLine) error) (string, error) {
	last := after
	failures := 0
	for {
		before := last
		state, done, err := c.followOnce(ctx, runID, &last, fn)
		if done {
			return state, nil
		}
		var cbErr *callbackError
		if errors.As(err, &cbErr) {
			return "", cbErr.err
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if err != nil && !Retryable(err) {
			return "", err
		}
		if last > before {
			failures = 0
		} else {
			failures++
		}
		if failures > followRetries {
			if err == nil {
				err = errors.New("stream ended without an end event")
			}
			return "", fmt.Errorf("follow logs of %s: %w", runID, err)
		}
		t := time.NewTimer(followBackoff(failures))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
	}
}

// followOnce reads one connection. It reports done when the run's end was
// seen; *last advances past every line fn accepted.
func (c *Client) followOnce(ctx context.Context, runID string, last *int64, fn func(protocol.RunLogLine) error) (string, bool, error) {
	q := url.Values{"follow": {"true"}, "after": {strconv.FormatInt(*last, 10)}}
	u, err := endpoint(c.BaseURL, q, "v1", "runs", runID, "logs")
	if err != nil {
		return "", false, err
	}
	req, err := newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Accept", "text/event-stream, application/json, application/problem+json")
	c.authorize(req)
	hc := c.HTTP
	if hc == nil {
		// A followed stream lasts as long as the run: no overall timeout.
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", false, ctx.Err()
		}
		return "", false, &transportError{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", false, decodeError(resp)
	}
	deliver := func(l protocol.RunLogLine) error {
		if l.ID <= *last {
			return nil // already delivered before a reconnect
		}
		if err := fn(l); err != nil {
			return &callbackError{err: err}
		}
		*last = l.ID
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/json" {
		// A server may answer a finished run with the plain listing.
		var list protocol.LogList
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return "", false, &transportError{err: fmt.Errorf("decode logs: %w", err)}
		}
		for _, l := range list.Lines {
			if err := deliver(l); err != nil {
				return "", false, err
			}
		}
		return list.RunState, list.Done, nil
	}
	if mt != "text/event-stream" {
		return "", false, fmt.Errorf("follow logs: unexpected content type %q", mt)
	}
	return readEvents(resp, deliver)
}

// readEvents parses a text/event-stream body (WHATWG "server-sent events").
func readEvents(resp *http.Response, deliver func(protocol.RunLogLine) error) (string, bool, error) {
	sc := bufio.NewScanner(resp.Body)
	// A line holds a log line of up to 64 KiB, JSON-escaped.
	sc.Buffer(make([]byte, 64<<10), protocol.MaxBodyBytes)
	var event, id string
	var data strings.Builder
	hasData := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if hasData || event != "" {
				state, done, err := dispatch(event, id, data.String(), deliver)
				if err != nil || done {
					return state, done, err
				}
			}
			event, id, hasData = "", "", false
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // comment, used as keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "id":
			id = value
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, &transportError{err: fmt.Errorf("read event stream: %w", err)}
	}
	// EOF without an end event: the stream was dropped.
	return "", false, nil
}

func dispatch(event, id, data string, deliver func(protocol.RunLogLine) error) (string, bool, error) {
	switch event {
	case "", "line":
		var l protocol.RunLogLine
		if err := json.Unmarshal([]byte(data), &l); err != nil {
			return "", false, fmt.Errorf("decode log line event: %w", err)
		}
		if l.ID == 0 && id != "" {
			if n, err := strconv.ParseInt(id, 10, 64); err == nil {
				l.ID = n
			}
		}
		return "", false, deliver(l)
	case "end":
		var end protocol.LogEnd
		if err := json.Unmarshal([]byte(data), &end); err != nil {
			return "", false, fmt.Errorf("decode end event: %w", err)
		}
		return end.RunState, true, nil
	default:
		return "", false, nil // unknown events are for newer clients
	}
}
