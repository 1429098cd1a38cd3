package creds

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
)

const testIssuer = "https://jobplane.example"

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type fixture struct {
	clk *clock.Fake
	ks  *KeySet
	iss *Issuer
	ver *Verifier
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	clk := clock.NewFake(t0)
	ks := NewKeySet(time.Hour)
	rec, err := GenerateKey(t0)
	require.NoError(t, err)
	require.NoError(t, ks.Add(rec))
	iss, err := NewIssuer(IssuerConfig{Issuer: testIssuer, MaxLifetime: time.Hour, Clock: clk, Keys: ks})
	require.NoError(t, err)
	ver, err := NewVerifier(VerifierConfig{Issuer: testIssuer, MaxLifetime: time.Hour, Clock: clk, Keys: ks})
	require.NoError(t, err)
	return &fixture{clk: clk, ks: ks, iss: iss, ver: ver}
}

func testIdentity() RunIdentity {
	return RunIdentity{
		RunID: "run_01HZX3QA0000000000000000", AttemptID: "att_01HZX3QB0000000000000000",
		Job: "nightly-backup", Channel: "prod", Tenant: "default",
		Grants:   map[string]Access{"pg-main": AccessRead, "s3-backups": AccessWrite},
		Deadline: t0.Add(10 * time.Minute),
	}
}

func (f *fixture) mint(t testing.TB) (string, Claims) {
	t.Helper()
	tok, c, err := f.iss.Mint(testIdentity())
	require.NoError(t, err)
	return tok, c
}

// validClaims is a payload the verifier accepts at t0 (before edits).
func validClaims() map[string]any {
	return map[string]any{
		"iss": testIssuer, "aud": DefaultAudience, "sub": "run:r1",
		"iat": t0.Unix(), "nbf": t0.Unix(), "exp": t0.Add(10 * time.Minute).Unix(), "jti": "j1",
		"run_id": "r1", "attempt_id": "a1", "job": "j", "channel": "prod", "tenant": "default",
		"grants": map[string]any{"pg": "read"},
	}
}

func (f *fixture) signingKey(t testing.TB) (string, ed25519.PrivateKey) {
	kid, priv, err := f.ks.SigningKey()
	require.NoError(t, err)
	return kid, priv
}

func b64(v []byte) string { return base64.RawURLEncoding.EncodeToString(v) }

func mustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// forge builds a compact JWS by hand from an arbitrary header and payload,
// signed with Ed25519 (the verifier's real key), so that every refusal below
// is due to the property under test and not to a bad signature.
func forge(t testing.TB, header, claims any, priv ed25519.PrivateKey) string {
	h, p := b64(mustJSON(t, header)), b64(mustJSON(t, claims))
	return h + "." + p + "." + b64(ed25519.Sign(priv, []byte(h+"."+p)))
}

func forgeHMAC(t testing.TB, header, claims any, key []byte) string {
	h, p := b64(mustJSON(t, header)), b64(mustJSON(t, claims))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h + "." + p))
	return h + "." + p + "." + b64(mac.Sum(nil))
}

func goodHeader(kid string) map[string]any {
	return map[string]any{"alg": "EdDSA", "typ": TokenType, "kid": kid}
}

func edSign(priv ed25519.PrivateKey, s string) []byte { return ed25519.Sign(priv, []byte(s)) }
