package api_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// A result may carry the attempt's last log chunk: it is stored with the
// result, as the same chunk sent on its own would be, and a bad chunk is
// refused with the field at fault before anything is recorded.
func TestResultCarriesLastLogChunk(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		run := e.request("echo", `{"message":"x"}`)
		rc := e.runner()
		asg, _ := e.claim(rc)
		require.Equal(t, run.ID, asg.RunID)
		ref := apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token}
		require.NoError(t, rc.Logs(e.ctx(), ref, protocol.LogsRequest{Seq: 0, Lines: []protocol.LogLine{{Stream: "stdout", Text: "first"}}}))

		_, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded",
			Logs: &protocol.LogsRequest{Seq: 1, Lines: []protocol.LogLine{{Stream: "video", Text: "x"}}}})
		var ae *apiclient.APIError
		require.True(t, errors.As(err, &ae), "got %v", err)
		require.Equal(t, 400, ae.Status)
		require.Equal(t, protocol.CodeBadRequest, ae.Problem.Code)
		require.Equal(t, "logs.lines[0].stream", ae.Problem.Field)
		require.Equal(t, "running", e.run(run.ID).State, "a refused result records nothing")

		at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		last := &protocol.LogsRequest{Seq: 1, Lines: []protocol.LogLine{{Stream: "stdout", Text: "last"}, {At: at, Stream: "stderr", Text: "bye"}}}
		res, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded", RequestID: "r1", Logs: last})
		require.NoError(t, err)
		require.Equal(t, "succeeded", res.RunState)
		// The answer was lost; the retry is acknowledged and stores nothing twice.
		_, err = rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded", RequestID: "r1", Logs: last})
		require.NoError(t, err)

		logs, err := e.admin.Logs(e.ctx(), run.ID, 0)
		require.NoError(t, err)
		var texts []string
		for _, l := range logs.Lines {
			texts = append(texts, l.Text)
			require.False(t, l.At.IsZero())
		}
		require.Equal(t, []string{"first", "last", "bye"}, texts)
		require.True(t, logs.Lines[2].At.Equal(at))
		require.Equal(t, "succeeded", logs.RunState)
	})
}
