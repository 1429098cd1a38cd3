package creds

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// handVerify is an independent RFC 7515 compact-JWS verifier that shares no
// code with Verify or go-jose: it resolves the kid in the published JWKS
// JSON, decodes the OKP key itself and checks the Ed25519 signature over
// "header.payload". It is how a third party with only the JWKS sees a token.
func handVerify(jwksJSON []byte, token string) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("not compact")
	}
	dec := base64.RawURLEncoding
	var hdr struct{ Alg, Typ, Kid string }
	raw, err := dec.DecodeString(parts[0])
	if err != nil || json.Unmarshal(raw, &hdr) != nil {
		return nil, errors.New("bad header")
	}
	if hdr.Alg != "EdDSA" || hdr.Typ != "jobplane-run+jwt" {
		return nil, errors.New("unexpected alg/typ")
	}
	var set struct {
		Keys []struct{ Kty, Crv, Kid, X, Alg, Use string }
	}
	if err := json.Unmarshal(jwksJSON, &set); err != nil {
		return nil, err
	}
	for _, k := range set.Keys {
		if k.Kid != hdr.Kid || k.Kty != "OKP" || k.Crv != "Ed25519" || k.Alg != "EdDSA" || k.Use != "sig" {
			continue
		}
		x, err := dec.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("bad jwk")
		}
		sig, err := dec.DecodeString(parts[2])
		if err != nil || !ed25519.Verify(x, []byte(parts[0]+"."+parts[1]), sig) {
			return nil, errors.New("bad signature")
		}
		payload, err := dec.DecodeString(parts[1])
		if err != nil {
			return nil, err
		}
		var claims map[string]any
		return claims, json.Unmarshal(payload, &claims)
	}
	return nil, errors.New("kid not in JWKS")
}

func TestInteropHandVerifier(t *testing.T) {
	f := newFixture(t)
	tok, c := f.mint(t)
	jwks, err := f.ks.JWKS()
	require.NoError(t, err)

	claims, err := handVerify(jwks, tok)
	require.NoError(t, err)
	require.Equal(t, testIssuer, claims["iss"])
	require.Equal(t, "jobplane", claims["aud"])
	require.Equal(t, "run:"+c.RunID, claims["sub"])
	require.Equal(t, c.AttemptID, claims["attempt_id"])
	require.Equal(t, float64(c.Expiry.Unix()), claims["exp"])
	require.Equal(t, map[string]any{"pg-main": "read", "s3-backups": "write"}, claims["grants"])

	// And the converse: it refuses what it should.
	parts := strings.Split(tok, ".")
	_, err = handVerify(jwks, parts[0]+"."+b64([]byte(`{"aud":"x"}`))+"."+parts[2])
	require.Error(t, err)

	// After rotation the JWKS carries both keys and both tokens verify.
	_, _, err = f.ks.Rotate(f.clk.Now())
	require.NoError(t, err)
	tok2, _ := f.mint(t)
	jwks, err = f.ks.JWKS()
	require.NoError(t, err)
	_, err = handVerify(jwks, tok)
	require.NoError(t, err)
	_, err = handVerify(jwks, tok2)
	require.NoError(t, err)
}

const nodeVerifier = `
const crypto = require('crypto');
const [jwks, token] = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const [h, p, s] = token.split('.');
const header = JSON.parse(Buffer.from(h, 'base64url'));
if (header.alg !== 'EdDSA' || header.typ !== 'jobplane-run+jwt') throw new Error('alg/typ');
const jwk = jwks.keys.find(k => k.kid === header.kid);
if (!jwk) throw new Error('kid');
const key = crypto.createPublicKey({ key: jwk, format: 'jwk' });
const ok = crypto.verify(null, Buffer.from(h + '.' + p), key, Buffer.from(s, 'base64url'));
if (!ok) throw new Error('signature');
process.stdout.write(Buffer.from(p, 'base64url').toString());
`

func TestInteropNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH")
	}
	f := newFixture(t)
	tok, c := f.mint(t)
	jwks, err := f.ks.JWKS()
	require.NoError(t, err)

	script := filepath.Join(t.TempDir(), "verify.js")
	require.NoError(t, os.WriteFile(script, []byte(nodeVerifier), 0o600))
	run := func(token string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, script)
		cmd.Stdin = bytes.NewReader(mustJSON(t, []any{json.RawMessage(jwks), token}))
		return cmd.Output()
	}

	out, err := run(tok)
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(out, &claims))
	require.Equal(t, "run:"+c.RunID, claims["sub"])
	require.Equal(t, c.Tenant, claims["tenant"])

	parts := strings.Split(tok, ".")
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	require.NoError(t, err)
	sig[5] ^= 0x40
	_, err = run(parts[0] + "." + parts[1] + "." + b64(sig))
	require.Error(t, err, "node must refuse a flipped signature bit")
}
