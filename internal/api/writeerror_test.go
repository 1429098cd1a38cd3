package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/internal/protocol"
)

var errNotFoundForTest = protocol.ErrNotFound

// TestWriteErrorCanceledIsNotAnInternalError: a caller hanging up during a
// long poll is answered 500 to nobody and logged at debug, not as an error;
// any other unexpected error is still logged as one.
func TestWriteErrorCanceledIsNotAnInternalError(t *testing.T) {
	for _, c := range []struct {
		err       error
		wantError bool
	}{
		{fmt.Errorf("claim: %w", context.Canceled), false},
		{errors.New("disk on fire"), true},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		w := httptest.NewRecorder()
		writeError(w, log, c.err)
		if w.Code != http.StatusInternalServerError {
			t.Errorf("%v: status %d", c.err, w.Code)
		}
		if got := strings.Contains(buf.String(), "level=ERROR"); got != c.wantError {
			t.Errorf("%v: logged as an error = %v, want %v; log: %s", c.err, got, c.wantError, buf.String())
		}
	}
}

// reportingRecorder is an edge writer that takes internal errors.
type reportingRecorder struct {
	*httptest.ResponseRecorder
	got []error
}

func (r *reportingRecorder) ReportError(err error) bool {
	r.got = append(r.got, err)
	return true
}

// TestWriteErrorReportsToTheEdge: behind the server's edge writer an
// internal error is handed to it (which logs it with the request's IDs)
// and not logged a second time here; refusals are not internal errors.
func TestWriteErrorReportsToTheEdge(t *testing.T) {
	for _, c := range []struct {
		err      error
		reported bool
	}{
		{errors.New("disk on fire"), true},
		{fmt.Errorf("claim: %w", context.Canceled), false},
		{fmt.Errorf("no such run: %w", errNotFoundForTest), false},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		w := &reportingRecorder{ResponseRecorder: httptest.NewRecorder()}
		writeError(w, log, c.err)
		if got := len(w.got) == 1; got != c.reported {
			t.Errorf("%v: reported = %v, want %v", c.err, got, c.reported)
		}
		if c.reported && strings.Contains(buf.String(), "level=ERROR") {
			t.Errorf("%v: logged twice; log: %s", c.err, buf.String())
		}
	}
}
