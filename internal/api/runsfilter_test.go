package api_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// A state filter that names no run state is the client's mistake, not an
// empty list: 400 naming the field and the states there are.
func TestListRunsRefusesUnknownState(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdb.SQLite(t))
	code, pc, body := e.bearer("GET", "/v1/runs?state=bogus", adminToken, "")
	require.Equal(t, 400, code, string(body))
	require.Equal(t, protocol.CodeBadRequest, pc)
	var p protocol.Problem
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, "state", p.Field)
	require.Contains(t, p.Detail, "pending_approval")
	code, pc, _ = e.bearer("GET", "/v1/runs?state=succeeded", adminToken, "")
	require.Equal(t, 200, code, pc)
}
