package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// One rule for NUL on both stores: a client's text holding one is 400
// naming the field; a job's output holding one is stored with U+FFFD in
// its place, and the run finishes.
func TestNULInText(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		for field, body := range map[string]*protocol.RunRequest{
			"params/message": {Job: "echo", Channel: "prod", Params: []byte(`{"message":"a\u0000b"}`)},
			"reason":         {Job: "echo", Channel: "prod", Reason: "why\x00"},
		} {
			_, err := e.admin.CreateRun(e.ctx(), body)
			require.Equal(t, 400, apiclient.StatusOf(err), "%s: %v", field, err)
			var ae *apiclient.APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, field, ae.Problem.Field)
		}

		run := e.request("echo", "")
		rc := e.runner()
		_, ref := e.claim(rc)
		require.NoError(t, rc.Logs(e.ctx(), ref, protocol.LogsRequest{Seq: 1, Lines: []protocol.LogLine{
			{At: e.clock.Now(), Stream: "stdout", Text: "before\x00after"}}}))
		_, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded", Summary: "done\x00", Logs: &protocol.LogsRequest{Seq: 2,
			Lines: []protocol.LogLine{{At: e.clock.Now().Add(time.Second), Stream: "stdout", Text: "\x00"}}}})
		require.NoError(t, err)
		require.Equal(t, "succeeded", e.run(run.ID).State)
		page, err := e.admin.Logs(e.ctx(), run.ID, 0)
		require.NoError(t, err)
		var texts []string
		for _, l := range page.Lines {
			texts = append(texts, l.Text)
		}
		require.Equal(t, []string{"before\uFFFDafter", "\uFFFD"}, texts)
	})
}
