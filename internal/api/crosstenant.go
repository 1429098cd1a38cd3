package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync"

	"github.com/jobplane/jobplane/internal/authn"
)

// watchCrossTenant runs a signed handler with the MT2 watch in its context
// and writes the audit of any cross-tenant reference before the first byte
// of the answer, so that the event exists by the time the caller sees the
// refusal (and tests need not wait for it).
//
// A call whose nonce is still pending (authn.VerifyRunnerDeferred) has it
// recorded first, at the same moment: no answer leaves without its nonce
// committed. Should it be known, the handler's answer is dropped and the
// replay refused instead, unless that answer is a server error: a nonce
// found after one is the call's own, committed by a transaction whose
// outcome the handler could not learn, and "retry" is the true answer.
func (h *Handler) watchCrossTenant(w http.ResponseWriter, r *http.Request, call *authn.SignedCall, fn func(http.ResponseWriter, *http.Request, *authn.SignedCall)) {
	ctx, flush := h.svc.WatchCrossTenant(r.Context(), r.URL.Path, call)
	fw := &flushFirst{ResponseWriter: w, flush: flush, status: http.StatusOK}
	if p := call.Nonce; p != nil {
		fw.gate = func() error { return h.auth.RecordNonce(context.WithoutCancel(r.Context()), p) }
		fw.log = h.log
	}
	fn(fw, r.WithContext(ctx), call)
	fw.once.Do(fw.first)
}

// flushFirst calls gate and flush once, before the status line is written.
type flushFirst struct {
	http.ResponseWriter
	gate    func() error
	flush   func()
	log     *slog.Logger
	once    sync.Once
	status  int
	refused bool
}

func (f *flushFirst) first() {
	if f.gate != nil {
		if err := f.gate(); err != nil && f.status < 500 {
			f.refused = true
			writeError(f.ResponseWriter, f.log, err)
			return
		}
	}
	f.flush()
}

func (f *flushFirst) WriteHeader(code int) {
	f.once.Do(func() { f.status = code; f.first() })
	if f.refused {
		return
	}
	f.ResponseWriter.WriteHeader(code)
}

func (f *flushFirst) Write(b []byte) (int, error) {
	f.once.Do(f.first)
	if f.refused {
		return len(b), nil
	}
	return f.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (f *flushFirst) Unwrap() http.ResponseWriter { return f.ResponseWriter }
