package fakegithub_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func newReceiver(t *testing.T, fn func(http.Header, []byte)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fn(r.Header, b)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
