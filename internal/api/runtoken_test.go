package api_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func (e *testEnv) bearer(method, path, token string, body string) (int, string, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p protocol.Problem
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Code, b
}

// verifyIndependently checks a compact JWS against a JWKS document with
// nothing but crypto/ed25519 and encoding/json: a second implementation,
// sharing no code with the issuer.
func verifyIndependently(t *testing.T, jwks []byte, token string) map[string]any {
	t.Helper()
	var set struct {
		Keys []struct {
			Kty, Crv, X, Kid, Alg string
		} `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(jwks, &set))
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	hb, err := base64.RawURLEncoding.DecodeString(parts[0])
	require.NoError(t, err)
	var hdr struct{ Alg, Typ, Kid string }
	require.NoError(t, json.Unmarshal(hb, &hdr))
	require.Equal(t, "EdDSA", hdr.Alg)
	require.Equal(t, "jobplane-run+jwt", hdr.Typ)
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	require.NoError(t, err)
	for _, k := range set.Keys {
		if k.Kid != hdr.Kid {
			continue
		}
		require.Equal(t, "OKP", k.Kty)
		require.Equal(t, "Ed25519", k.Crv)
		pub, err := base64.RawURLEncoding.DecodeString(k.X)
		require.NoError(t, err)
		require.True(t, ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig), "signature does not verify")
		pb, err := base64.RawURLEncoding.DecodeString(parts[1])
		require.NoError(t, err)
		var claims map[string]any
		require.NoError(t, json.Unmarshal(pb, &claims))
		return claims
	}
	t.Fatalf("kid %s is not published", hdr.Kid)
	return nil
}

// TestRunTokens covers acceptance cases T1–T6 through the HTTP API.
func TestRunTokens(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		run := e.request("echo", "")
		other := e.request("echo", "")
		rc := e.runner()
		asg, ref := e.claim(rc)
		require.NotNil(t, asg.RunToken)
		tok := asg.RunToken.Token
		require.False(t, asg.RunToken.ExpiresAt.After(asg.Lease.Deadline), "exp no later than the deadline")

		t.Run("claims, JWKS and an independent verifier", func(t *testing.T) {
			code, _, jwks := e.bearer("GET", "/.well-known/jwks.json", "", "")
			require.Equal(t, 200, code)
			claims := verifyIndependently(t, jwks, tok)
			require.Equal(t, testIssuer, claims["iss"])
			require.Equal(t, "jobplane", claims["aud"])
			require.Equal(t, "run:"+asg.RunID, claims["sub"])
			require.Equal(t, asg.RunID, claims["run_id"])
			require.Equal(t, asg.AttemptID, claims["attempt_id"])
			require.Equal(t, "echo", claims["job"])
			require.Equal(t, "prod", claims["channel"])
			require.NotEmpty(t, claims["jti"])
			require.NotEmpty(t, claims["tenant"])
			require.Equal(t, float64(asg.RunToken.ExpiresAt.Unix()), claims["exp"])
			code, _, disc := e.bearer("GET", "/.well-known/openid-configuration", "", "")
			require.Equal(t, 200, code)
			require.Contains(t, string(disc), `"jwks_uri":"`+testIssuer+`/.well-known/jwks.json"`)
		})

		t.Run("the job may read its own identity", func(t *testing.T) {
			code, pc, body := e.bearer("GET", "/v1/run", tok, "")
			require.Equal(t, 200, code, pc)
			require.Contains(t, string(body), asg.AttemptID)
		})

		t.Run("T1 a run token on a mutating endpoint is refused and audited", func(t *testing.T) {
			code, pc, _ := e.bearer("POST", "/v1/runs", tok, `{"job":"echo","channel":"prod"}`)
			require.Equal(t, 403, code)
			require.Equal(t, protocol.CodeForbidden, pc)
			code, pc, _ = e.bearer("POST", "/v1/runs/batch", tok, `{"runs":[{"job":"echo","channel":"prod"}]}`)
			require.Equal(t, 403, code, "a job may not request runs in a batch either")
			require.Equal(t, protocol.CodeForbidden, pc)
			found := false
			all, err := st.AuditList(e.ctx(), &store.AuditListParams{Tenant: tenantOf(t, st), Limit: 0})
			require.NoError(t, err)
			for _, ev := range all {
				if ev.Action == "run_token.refused" && ev.Subject == asg.RunID {
					found = true
				}
			}
			require.True(t, found, "the refusal is audited")
		})

		t.Run("T2 a token of run X does not open run Y", func(t *testing.T) {
			code, _, body := e.bearer("GET", "/v1/runs/"+other.ID, tok, "")
			require.Equal(t, 403, code)
			require.NotContains(t, string(body), other.ID, "no data leaks in the error")
		})

		t.Run("T4 forged and malformed tokens", func(t *testing.T) {
			parts := strings.Split(tok, ".")
			none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"jobplane-run+jwt"}`)) + "." + parts[1] + "."
			tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"run_id":"x"}`)) + "." + parts[2]
			for name, bad := range map[string]string{"alg none": none, "tampered": tampered, "garbage": "a.b.c"} {
				code, pc, _ := e.bearer("GET", "/v1/run", bad, "")
				require.Equal(t, 401, code, name)
				require.Equal(t, protocol.CodeUnauthorized, pc, name)
			}
		})

		t.Run("T5 a token is refused once its attempt has ended", func(t *testing.T) {
			_, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded"})
			require.NoError(t, err)
			code, pc, _ := e.bearer("GET", "/v1/run", tok, "")
			require.Equal(t, 401, code, "exp has not passed, but the attempt has ended")
			require.Equal(t, protocol.CodeUnauthorized, pc)
		})

		t.Run("T3 an expired token is refused", func(t *testing.T) {
			asg2, _ := e.claim(rc)
			require.Contains(t, []string{run.ID, other.ID}, asg2.RunID)
			e.clock.Advance(asg2.RunToken.ExpiresAt.Sub(e.clock.Now()) + time.Hour) // far past exp and the lease
			code, _, _ := e.bearer("GET", "/v1/run", asg2.RunToken.Token, "")
			require.Equal(t, 401, code)
		})

		t.Run("key rotation keeps old tokens verifiable", func(t *testing.T) {
			admin := adminActor(t, st)
			// As api.user would: the request's scope is the actor's tenant.
			_, err := e.creds.RotateSigningKeys(store.WithTenant(e.ctx(), admin.TenantID), admin)
			require.NoError(t, err)
			code, _, jwks := e.bearer("GET", "/.well-known/jwks.json", "", "")
			require.Equal(t, 200, code)
			var set struct{ Keys []json.RawMessage }
			require.NoError(t, json.Unmarshal(jwks, &set))
			require.Len(t, set.Keys, 2, "the retired key stays published")
			verifyIndependently(t, jwks, tok)
		})
		_ = run
	})
}

func tenantOf(t *testing.T, st store.Store) string {
	t.Helper()
	tn, err := st.TenantEnsure(t.Context(), principal.DefaultTenant, nil)
	require.NoError(t, err)
	return tn.ID
}

func adminActor(t *testing.T, st store.Store) principal.Actor {
	t.Helper()
	return principal.Actor{TenantID: tenantOf(t, st), Name: "admin", Kind: "user", Admin: true}
}
