package api_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

var scopeDefinitions = map[string]string{
	"connectors/billing.yaml": `name: billing
type: static
bindings:
  prod: {read: {TOKEN: billing-read}, write: {TOKEN: billing-write}}
`,
	"jobs/charge.yaml": `name: charge
description: Writes to billing when granted
run: {command: ["true"]}
connectors: {billing: write}
`,
	"groups.yaml": "groups:\n  ops: {members: [admin]}\n",
	"policies/all.yaml": `rules:
  - id: charge-with-write
    jobs: [charge]
    users: ["*"]
    grants: {billing: write}
`,
}

// TestRunTokenScope covers acceptance case T6: a token never carries more
// than the run was granted, and a narrower token of the same attempt gets
// the narrower credentials — the connector level is the intersection of the
// run's grants and the token's.
func TestRunTokenScope(t *testing.T) {
	t.Parallel()
	e := newEnvFiles(t, testdb.SQLite(t), scopeDefinitions)
	require.NoError(t, e.admin.SetSecret(e.ctx(), "billing-read", "", "read-value-123"))
	require.NoError(t, e.admin.SetSecret(e.ctx(), "billing-write", "", "write-value-456"))
	e.request("charge", "")
	rc := e.runner()
	asg, _ := e.claim(rc)
	require.Equal(t, []string{"billing"}, asg.Connectors)

	fetch := func(tok string) protocol.RunConnectors {
		code, pc, body := e.bearer("GET", "/v1/run/connectors", tok, "")
		require.Equal(t, 200, code, pc)
		var out protocol.RunConnectors
		require.NoError(t, json.Unmarshal(body, &out))
		return out
	}
	full := fetch(asg.RunToken.Token)
	require.Equal(t, "write-value-456", full.Env["JOBPLANE_CONNECTOR_BILLING_TOKEN"])
	require.Contains(t, full.Mask, "write-value-456")

	// A token of the same attempt minted with only read access.
	run, err := e.store.RunGetByID(e.ctx(), asg.RunID, false)
	require.NoError(t, err)
	att, err := e.store.AttemptGetByID(e.ctx(), asg.AttemptID, false)
	require.NoError(t, err)
	narrow, err := e.tokens.Mint(run, att, map[string]string{"billing": "read"})
	require.NoError(t, err)
	got := fetch(narrow.Token)
	require.Equal(t, "read-value-123", got.Env["JOBPLANE_CONNECTOR_BILLING_TOKEN"], "the narrower token gets read access only")

	// There is no endpoint that exchanges or refreshes a token.
	for _, path := range []string{"/v1/run/token", "/v1/run/refresh", "/v1/tokens/exchange"} {
		code, _, _ := e.bearer("POST", path, asg.RunToken.Token, "{}")
		require.Contains(t, []int{403, 404, 405}, code, path)
	}
}
