package server_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestParamsNumberOutOfRange: a number in params that no store can keep
// (beyond PostgreSQL's numeric, which SQLite's text would keep but the
// other replica's database could not) is refused 400 naming the field, on
// both stores, and a number within range is kept as written.
func TestParamsNumberOutOfRange(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		repo := t.TempDir()
		f := files(`"true"`)
		f["jobs/num.yaml"] = "name: num\nowners: [ops]\nrun:\n  command: [\"true\"]\nparams:\n  type: object\n  properties:\n    n: {type: number}\n    deep: {type: object}\n"
		_, err := gitsync.InitRepo(repo, "main", f, "init", gitsync.WithTime(t0))
		require.NoError(t, err)
		e := newEnv(t, st, repo, map[string]string{"prod": "main"})
		for _, tc := range []struct{ params, field string }{
			{`{"n": 1e1000000}`, "n"},
			{`{"n": -1e-1000000}`, "n"},
			{`{"deep": {"x": [1, 2e131073]}}`, "deep/x/1"},
		} {
			_, _, err := e.svc.RequestRun(ctx, e.admin, &protocol.RunRequest{Job: "num", Channel: "prod", Params: json.RawMessage(tc.params)})
			require.Error(t, err, tc.params)
			require.True(t, protocol.IsRefusal(err), "%s: %v", tc.params, err)
			var fe *protocol.FieldError
			require.ErrorAs(t, err, &fe, "%v", err)
			require.Equal(t, tc.field, fe.Field, "%v", err)
		}
		v, _, err := e.svc.RequestRun(ctx, e.admin, &protocol.RunRequest{Job: "num", Channel: "prod", Params: json.RawMessage(`{"n": 1e300, "deep": {"x": [123456789012345678901234567890]}}`)})
		require.NoError(t, err)
		require.JSONEq(t, `{"n": 1e300, "deep": {"x": [123456789012345678901234567890]}}`, string(v.Run.Params))
	})
}
