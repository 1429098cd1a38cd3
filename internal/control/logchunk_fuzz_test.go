package control

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/internal/protocol"
)

// FuzzLogChunk: whatever a runner puts in a result's "logs", the check
// either refuses it as a bad request naming a field under "logs." or
// returns exactly its lines, each on a known stream.
func FuzzLogChunk(f *testing.F) {
	f.Add([]byte(`{"outcome":"succeeded","logs":{"seq":1,"lines":[{"stream":"stdout","text":"x"}]}}`))
	f.Add([]byte(`{"logs":{"seq":-1,"lines":[]}}`))
	f.Add([]byte(`{"logs":{"seq":2,"lines":[{"stream":"video","text":""}]}}`))
	f.Add([]byte(`{"logs":{"seq":3,"lines":[{"at":"2026-01-01T00:00:00Z","stream":"system","text":"\u0000"}]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req protocol.ResultRequest
		if json.Unmarshal(body, &req) != nil || req.Logs == nil {
			return
		}
		lines, err := logChunk(req.Logs, "logs.")
		if err != nil {
			var fe *protocol.FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "logs.") || !errors.Is(err, protocol.ErrBadRequest) {
				t.Fatalf("refusal %v is not a bad request naming a logs field", err)
			}
			return
		}
		if len(lines) != len(req.Logs.Lines) || len(lines) > MaxLogLines || req.Logs.Seq < 0 {
			t.Fatalf("accepted %d of %d lines (seq %d)", len(lines), len(req.Logs.Lines), req.Logs.Seq)
		}
		for i, l := range lines {
			if l.Stream != "stdout" && l.Stream != "stderr" && l.Stream != "system" {
				t.Fatalf("line %d on stream %q accepted", i, l.Stream)
			}
			if l.Text != protocol.StorableText(req.Logs.Lines[i].Text) {
				t.Fatalf("line %d changed beyond its NULs becoming U+FFFD", i)
			}
		}
	})
}
