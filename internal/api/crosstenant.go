package api

import (
	"net/http"
	"sync"

	"github.com/jobplane/jobplane/internal/authn"
)

// watchCrossTenant runs a signed handler with the MT2 watch in its context
// and writes the audit of any cross-tenant reference before the first byte
// of the answer, so that the event exists by the time the caller sees the
// refusal (and tests need not wait for it).
func (h *Handler) watchCrossTenant(w http.ResponseWriter, r *http.Request, call *authn.SignedCall, fn func(http.ResponseWriter, *http.Request, *authn.SignedCall)) {
	ctx, flush := h.svc.WatchCrossTenant(r.Context(), r.URL.Path, call)
	fw := &flushFirst{ResponseWriter: w, flush: flush}
	fn(fw, r.WithContext(ctx), call)
	fw.once.Do(fw.flush)
}

// flushFirst calls flush once, before the status line is written.
type flushFirst struct {
	http.ResponseWriter
	flush func()
	once  sync.Once
}

func (f *flushFirst) WriteHeader(code int) {
	f.once.Do(f.flush)
	f.ResponseWriter.WriteHeader(code)
}

func (f *flushFirst) Write(b []byte) (int, error) {
	f.once.Do(f.flush)
	return f.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (f *flushFirst) Unwrap() http.ResponseWriter { return f.ResponseWriter }
