package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/protocol"
)

// bodyReadTimeout is how long any route's client has to send the whole
// body of a request, from the end of its headers (which have
// ReadHeaderTimeout). A client that sends one byte a second is cut off
// then, holding no handler or memory longer. Artifact uploads, whose
// bodies are as large as an artifact may be, have it per read instead: the
// bytes must keep coming.
var bodyReadTimeout = 30 * time.Second

// bodyLimit is the largest body a route reads: protocol.MaxBodyBytes for
// the API and the UI's forms (multipart ones too, which are then never
// spooled to disk), a webhook's own limit, and none at the edge for an
// artifact upload, which is held to its declared size by its handler.
func bodyLimit(r *http.Request) int64 {
	switch {
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/uploads/"):
		return -1
	case r.URL.Path == "/v1/github/webhook":
		return github.MaxWebhookBody
	}
	return protocol.MaxBodyBytes
}

// limitBodies bounds, before any handler reads, how much of a request's
// body is read and for how long. A body declared larger than the route's
// limit is refused 413 too_large at once, unread; one that turns out
// larger stops being read one byte past the limit (the handler sees
// *http.MaxBytesError, and the connection is closed after the answer).
func limitBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		limit := bodyLimit(r)
		if limit >= 0 && r.ContentLength > limit {
			w.Header().Set("Connection", "close")
			writeProblem(w, protocol.ErrTooLarge, fmt.Sprintf("a body of %d bytes is over this route's limit of %d bytes", r.ContentLength, limit))
			return
		}
		body := &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), perRead: limit < 0}
		if limit >= 0 {
			body.ReadCloser = http.MaxBytesReader(w, r.Body, limit)
		}
		body.arm()
		r.Body = body
		h.ServeHTTP(w, r)
	})
}

// deadlineBody holds the connection's read deadline over a body until it
// is read to its end, then lifts it, so that a long poll that follows
// (a claim) is not cut by it.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	perRead bool
	done    bool
}

func (b *deadlineBody) arm() {
	// A writer without a connection (a test's recorder) has no deadline
	// to set; the limit still holds.
	_ = b.rc.SetReadDeadline(clock.Real{}.Now().Add(bodyReadTimeout))
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	if b.perRead {
		b.arm()
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		// Said here, where it is known, so that every route answers it
		// alike: 408 request_timeout (protocol.BodyError). The connection
		// is closed after the answer: its read side is past its deadline.
		err = fmt.Errorf("the body did not arrive within %s: %w", b.timeout(), protocol.ErrRequestTimeout)
	}
	return n, err
}

func (b *deadlineBody) timeout() string {
	if b.perRead {
		return fmt.Sprintf("%s of the last bytes read", bodyReadTimeout)
	}
	return fmt.Sprintf("%s of the request's headers", bodyReadTimeout)
}

// writeProblem answers a refusal at the edge, before any route.
func writeProblem(w http.ResponseWriter, e *protocol.Error, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(protocol.Problem{Type: "about:blank", Title: e.Title, Status: e.Status, Code: e.Code, Detail: detail})
}
