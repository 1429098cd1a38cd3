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
)

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
