package creds

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"
)

func TestMintVerifyRoundTrip(t *testing.T) {
	f := newFixture(t)
	tok, minted := f.mint(t)
	require.Less(t, len(tok), 2048)

	c, err := f.ver.Verify(tok)
	require.NoError(t, err)
	require.Equal(t, minted, *c)
	require.Equal(t, "run:run_01HZX3QA0000000000000000", c.Subject)
	require.Equal(t, DefaultAudience, c.Audience)
	require.Equal(t, testIssuer, c.Issuer)
	require.Equal(t, t0, c.IssuedAt)
	require.Equal(t, t0, c.NotBefore)
	require.Equal(t, t0.Add(10*time.Minute), c.Expiry, "exp is the attempt deadline")
	require.Equal(t, map[string]Access{"pg-main": AccessRead, "s3-backups": AccessWrite}, c.Grants)
	require.NotEmpty(t, c.ID)

	// Header is exactly alg, typ, kid.
	hdr, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	require.NoError(t, err)
	var h map[string]any
	require.NoError(t, json.Unmarshal(hdr, &h))
	kid, _ := f.signingKey(t)
	require.Equal(t, map[string]any{"alg": "EdDSA", "typ": TokenType, "kid": kid}, h)

	// jti is random per mint.
	tok2, c2, err := f.iss.Mint(testIdentity())
	require.NoError(t, err)
	require.NotEqual(t, tok, tok2)
	require.NotEqual(t, c.ID, c2.ID)
}

func TestMintExpiry(t *testing.T) {
	f := newFixture(t)
	id := testIdentity()

	id.Deadline = t0.Add(5 * time.Hour) // beyond the max lifetime: capped
	_, c, err := f.iss.Mint(id)
	require.NoError(t, err)
	require.Equal(t, t0.Add(time.Hour), c.Expiry)

	id.Deadline = t0.Add(90*time.Second + 700*time.Millisecond) // rounded down, never later
	_, c, err = f.iss.Mint(id)
	require.NoError(t, err)
	require.Equal(t, t0.Add(90*time.Second), c.Expiry)

	id.Deadline = t0
	_, _, err = f.iss.Mint(id)
	require.ErrorIs(t, err, ErrDeadlinePassed)

	id = testIdentity()
	id.Grants = map[string]Access{"pg": "admin"}
	_, _, err = f.iss.Mint(id)
	require.Error(t, err)
}

// T3: time claims, with the injected clock.
func TestVerifyTimeT3(t *testing.T) {
	f := newFixture(t)
	kid, priv := f.signingKey(t)
	exp := t0.Add(10 * time.Minute)

	tok, _ := f.mint(t)
	f.clk.Set(exp.Add(30 * time.Second)) // exactly the leeway: accepted
	_, err := f.ver.Verify(tok)
	require.NoError(t, err)
	f.clk.Set(exp.Add(31 * time.Second)) // one second more: expired
	_, err = f.ver.Verify(tok)
	require.ErrorIs(t, err, ErrTokenExpired)
	require.ErrorIs(t, err, ErrTokenInvalid)
	require.Equal(t, "token_expired", ProblemCode(err))
	f.clk.Set(exp.Add(time.Hour))
	_, err = f.ver.Verify(tok)
	require.ErrorIs(t, err, ErrTokenExpired)

	cases := []struct {
		name string
		at   time.Time // clock
		edit func(map[string]any)
		want error // nil = accepted
	}{
		{"nbf 30s ahead", t0, func(c map[string]any) { c["nbf"] = t0.Add(30 * time.Second).Unix() }, nil},
		{"nbf 31s ahead", t0, func(c map[string]any) { c["nbf"] = t0.Add(31 * time.Second).Unix() }, ErrTokenNotYetValid},
		{"nbf far future", t0, func(c map[string]any) { c["nbf"] = t0.Add(5 * time.Minute).Unix() }, ErrTokenNotYetValid},
		{"iat 30s ahead", t0, func(c map[string]any) { c["iat"] = t0.Add(30 * time.Second).Unix(); c["nbf"] = c["iat"] }, nil},
		{"iat 31s ahead", t0, func(c map[string]any) { c["iat"] = t0.Add(31 * time.Second).Unix(); delete(c, "nbf") }, ErrTokenNotYetValid},
		{"iat far future", t0, func(c map[string]any) {
			c["iat"] = t0.Add(24 * time.Hour).Unix()
			c["exp"] = t0.Add(25 * time.Hour).Unix()
			delete(c, "nbf")
		}, ErrTokenNotYetValid},
		{"missing exp", t0, func(c map[string]any) { delete(c, "exp") }, ErrTokenClaims},
		{"missing iat", t0, func(c map[string]any) { delete(c, "iat") }, ErrTokenClaims},
		{"missing nbf ok", t0, func(c map[string]any) { delete(c, "nbf") }, nil},
		{"exp as string", t0, func(c map[string]any) { c["exp"] = "2030-01-01" }, ErrTokenClaims},
		{"exp fractional", t0, func(c map[string]any) { c["exp"] = float64(exp.Unix()) + 0.5 }, ErrTokenClaims},
		{"exp negative", t0, func(c map[string]any) { c["exp"] = -1 }, ErrTokenClaims},
		{"exp huge", t0, func(c map[string]any) { c["exp"] = 1e30 }, ErrTokenClaims},
		{"exp past", t0.Add(time.Hour), func(c map[string]any) {}, ErrTokenExpired},
		{"lifetime exactly max", t0, func(c map[string]any) { c["exp"] = t0.Add(time.Hour).Unix() }, nil},
		{"lifetime over max", t0, func(c map[string]any) { c["exp"] = t0.Add(time.Hour + time.Second).Unix() }, ErrTokenLifetime},
		{"lifetime over max (old iat)", t0, func(c map[string]any) {
			c["iat"] = t0.Add(-2 * time.Hour).Unix()
			c["nbf"] = c["iat"]
		}, ErrTokenLifetime},
		{"exp before iat", t0, func(c map[string]any) { c["exp"] = t0.Add(-1 * time.Second).Unix() }, ErrTokenClaims},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.clk.Set(tc.at)
			c := validClaims()
			tc.edit(c)
			_, err := f.ver.Verify(forge(t, goodHeader(kid), c, priv))
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, ErrTokenInvalid)
		})
	}
}

func TestVerifierLeewayConfig(t *testing.T) {
	f := newFixture(t)
	_, err := NewVerifier(VerifierConfig{Issuer: testIssuer, Leeway: 31 * time.Second, Clock: f.clk, Keys: f.ks})
	require.Error(t, err)

	strict, err := NewVerifier(VerifierConfig{Issuer: testIssuer, MaxLifetime: time.Hour, Leeway: -1, Clock: f.clk, Keys: f.ks})
	require.NoError(t, err)
	tok, c := f.mint(t)
	f.clk.Set(c.Expiry)
	_, err = strict.Verify(tok)
	require.NoError(t, err)
	f.clk.Set(c.Expiry.Add(time.Second))
	_, err = strict.Verify(tok)
	require.ErrorIs(t, err, ErrTokenExpired)
}

// T4: header and claim attacks.
func TestVerifyHeaderAndClaimAttacksT4(t *testing.T) {
	f := newFixture(t)
	kid, priv := f.signingKey(t)
	pub := []byte(priv.Public().(ed25519.PublicKey))

	withHeader := func(edit func(map[string]any)) string {
		h := goodHeader(kid)
		edit(h)
		return forge(t, h, validClaims(), priv)
	}
	withClaims := func(edit func(map[string]any)) string {
		c := validClaims()
		edit(c)
		return forge(t, goodHeader(kid), c, priv)
	}
	jwkHeader := map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64(pub)}
	otherKey, err := GenerateKey(t0)
	require.NoError(t, err)

	noneHeader := b64(mustJSON(t, map[string]any{"alg": "none", "typ": TokenType, "kid": kid}))
	noneToken := noneHeader + "." + b64(mustJSON(t, validClaims())) + "."
	noneTokenSig := noneHeader + "." + b64(mustJSON(t, validClaims())) + ".AAAA"

	cases := []struct {
		name  string
		token string
		want  error
	}{
		{"alg none, empty signature", noneToken, ErrTokenMalformed},
		{"alg none, junk signature", noneTokenSig, ErrTokenHeader},
		{"alg HS256 keyed with public key", forgeHMAC(t, map[string]any{"alg": "HS256", "typ": TokenType, "kid": kid}, validClaims(), pub), ErrTokenHeader},
		{"alg HS256 keyed with JWK JSON", forgeHMAC(t, map[string]any{"alg": "HS256", "typ": TokenType, "kid": kid}, validClaims(), mustJSON(t, jwkHeader)), ErrTokenHeader},
		{"alg eddsa lowercase", withHeader(func(h map[string]any) { h["alg"] = "eddsa" }), ErrTokenHeader},
		{"alg Ed25519", withHeader(func(h map[string]any) { h["alg"] = "Ed25519" }), ErrTokenHeader},
		{"alg missing", withHeader(func(h map[string]any) { delete(h, "alg") }), ErrTokenHeader},
		{"alg array", withHeader(func(h map[string]any) { h["alg"] = []string{"EdDSA"} }), ErrTokenHeader},
		{"unknown kid", withHeader(func(h map[string]any) { h["kid"] = otherKey.KID }), ErrTokenUnknownKey},
		{"signed by unknown key with its kid", forge(t, goodHeader(otherKey.KID), validClaims(), otherKey.Private), ErrTokenUnknownKey},
		{"known kid, other key's signature", forge(t, goodHeader(kid), validClaims(), otherKey.Private), ErrTokenSignature},
		{"kid missing", withHeader(func(h map[string]any) { delete(h, "kid") }), ErrTokenHeader},
		{"kid number", withHeader(func(h map[string]any) { h["kid"] = 1 }), ErrTokenHeader},
		{"jku", withHeader(func(h map[string]any) { h["jku"] = "https://evil.example/jwks.json" }), ErrTokenHeader},
		{"x5u", withHeader(func(h map[string]any) { h["x5u"] = "https://evil.example/cert.pem" }), ErrTokenHeader},
		{"jwk", withHeader(func(h map[string]any) { h["jwk"] = jwkHeader }), ErrTokenHeader},
		{"x5c", withHeader(func(h map[string]any) { h["x5c"] = []string{"MIIB"} }), ErrTokenHeader},
		{"crit", withHeader(func(h map[string]any) { h["crit"] = []string{"exp"}; h["exp"] = 1 }), ErrTokenHeader},
		{"b64 false", withHeader(func(h map[string]any) { h["b64"] = false; h["crit"] = []string{"b64"} }), ErrTokenHeader},
		{"typ JWT", withHeader(func(h map[string]any) { h["typ"] = "JWT" }), ErrTokenHeader},
		{"typ upload capability", withHeader(func(h map[string]any) { h["typ"] = "jobplane-upload+jwt" }), ErrTokenHeader},
		{"typ source ticket", withHeader(func(h map[string]any) { h["typ"] = "jobplane-source+jwt" }), ErrTokenHeader},
		{"typ case variant", withHeader(func(h map[string]any) { h["typ"] = "JOBPLANE-RUN+JWT" }), ErrTokenHeader},
		{"typ missing", withHeader(func(h map[string]any) { delete(h, "typ") }), ErrTokenHeader},
		{"aud missing", withClaims(func(c map[string]any) { delete(c, "aud") }), ErrTokenClaims},
		{"aud empty", withClaims(func(c map[string]any) { c["aud"] = "" }), ErrTokenClaims},
		{"aud array", withClaims(func(c map[string]any) { c["aud"] = []string{DefaultAudience} }), ErrTokenClaims},
		{"aud array of two", withClaims(func(c map[string]any) { c["aud"] = []string{DefaultAudience, "vault"} }), ErrTokenClaims},
		{"aud wrong", withClaims(func(c map[string]any) { c["aud"] = "vault" }), ErrTokenClaims},
		{"aud null", withClaims(func(c map[string]any) { c["aud"] = nil }), ErrTokenClaims},
		{"iss wrong", withClaims(func(c map[string]any) { c["iss"] = "https://evil.example" }), ErrTokenClaims},
		{"iss missing", withClaims(func(c map[string]any) { delete(c, "iss") }), ErrTokenClaims},
		{"sub mismatch", withClaims(func(c map[string]any) { c["sub"] = "run:r2" }), ErrTokenClaims},
		{"run_id missing", withClaims(func(c map[string]any) { delete(c, "run_id") }), ErrTokenClaims},
		{"attempt_id missing", withClaims(func(c map[string]any) { delete(c, "attempt_id") }), ErrTokenClaims},
		{"tenant empty", withClaims(func(c map[string]any) { c["tenant"] = "" }), ErrTokenClaims},
		{"jti missing", withClaims(func(c map[string]any) { delete(c, "jti") }), ErrTokenClaims},
		{"grant level admin", withClaims(func(c map[string]any) { c["grants"] = map[string]any{"pg": "admin"} }), ErrTokenClaims},
		{"grants array", withClaims(func(c map[string]any) { c["grants"] = []string{"pg"} }), ErrTokenClaims},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.ver.Verify(tc.token)
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, ErrTokenInvalid)
			require.Equal(t, "token_invalid", ProblemCode(err))
		})
	}

	// Sanity: the forging helper itself produces accepted tokens.
	_, err = f.ver.Verify(forge(t, goodHeader(kid), validClaims(), priv))
	require.NoError(t, err)
}

func TestVerifyMalformed(t *testing.T) {
	f := newFixture(t)
	kid, priv := f.signingKey(t)
	tok, _ := f.mint(t)
	parts := strings.Split(tok, ".")
	h := b64([]byte(`{"alg":"EdDSA","typ":"` + TokenType + `","kid":"` + kid + `"}`))
	p := b64(mustJSON(t, validClaims()))
	signRaw := func(h, p string) string { return h + "." + p + "." + b64(edSign(priv, h+"."+p)) }

	cases := map[string]string{
		"empty":              "",
		"two parts":          parts[0] + "." + parts[1],
		"four parts":         tok + ".x",
		"padding":            parts[0] + "=." + parts[1] + "." + parts[2],
		"std base64 chars":   parts[0] + "." + parts[1] + "+/." + parts[2],
		"newline":            parts[0] + "\n." + parts[1] + "." + parts[2],
		"too large":          parts[0] + "." + strings.Repeat("A", MaxTokenSize) + "." + parts[2],
		"JSON serialization": `{"payload":"` + parts[1] + `","protected":"` + parts[0] + `","signature":"` + parts[2] + `"}`,
		"duplicate alg":      signRaw(b64([]byte(`{"alg":"EdDSA","alg":"none","typ":"`+TokenType+`","kid":"`+kid+`"}`)), p),
		"header not object":  signRaw(b64([]byte(`["EdDSA"]`)), p),
		"trailing header":    signRaw(b64([]byte(`{"alg":"EdDSA","typ":"`+TokenType+`","kid":"`+kid+`"}{}`)), p),
		"duplicate aud":      signRaw(h, b64([]byte(`{"aud":"jobplane","aud":"x"}`))),
		"payload not JSON":   signRaw(h, b64([]byte(`not json`))),
	}
	for name, token := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := f.ver.Verify(token)
			require.ErrorIs(t, err, ErrTokenMalformed)
			require.ErrorIs(t, err, ErrTokenInvalid)
		})
	}
}

func TestVerifyTampered(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.mint(t)
	parts := strings.Split(tok, ".")

	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(payload, &m))
	m["grants"] = map[string]any{"pg-main": "write", "s3-backups": "write"}
	tampered := parts[0] + "." + b64(mustJSON(t, m)) + "." + parts[2]
	_, err = f.ver.Verify(tampered)
	require.ErrorIs(t, err, ErrTokenSignature)

	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	require.NoError(t, err)
	sig[0] ^= 1
	_, err = f.ver.Verify(parts[0] + "." + parts[1] + "." + b64(sig))
	require.ErrorIs(t, err, ErrTokenSignature)

	_, err = f.ver.Verify(parts[0] + "." + parts[1] + "." + b64(sig[:32]))
	require.ErrorIs(t, err, ErrTokenInvalid)
}

func TestCustomAudience(t *testing.T) {
	f := newFixture(t)
	iss, err := NewIssuer(IssuerConfig{Issuer: testIssuer, Audience: "vault", MaxLifetime: time.Hour, Clock: f.clk, Keys: f.ks})
	require.NoError(t, err)
	tok, _, err := iss.Mint(testIdentity())
	require.NoError(t, err)
	_, err = f.ver.Verify(tok) // expects "jobplane"
	require.ErrorIs(t, err, ErrTokenClaims)
	ver, err := NewVerifier(VerifierConfig{Issuer: testIssuer, Audience: "vault", MaxLifetime: time.Hour, Clock: f.clk, Keys: f.ks})
	require.NoError(t, err)
	c, err := ver.Verify(tok)
	require.NoError(t, err)
	require.Equal(t, "vault", c.Audience)
}

func FuzzParseToken(f *testing.F) {
	fx := newFixture(f)
	kid, priv := fx.signingKey(f)
	tok, _ := fx.mint(f)
	forged := forge(f, goodHeader(kid), validClaims(), priv)
	valid := []string{tok, forged}
	f.Add(tok)
	f.Add(forged)
	f.Add(forge(f, map[string]any{"alg": "none"}, validClaims(), priv))
	f.Add("a.b.c")
	f.Add("")
	f.Add("eyJhbGciOiJFZERTQSJ9..")
	f.Fuzz(func(t *testing.T, s string) {
		start := time.Now()
		c, err := fx.ver.Verify(s)
		if err != nil {
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrTokenInvalid)
		} else {
			// Only a genuine signature can pass: the input must be one we signed
			// (Ed25519 is not malleable and base64url decoding is strict).
			require.NotNil(t, c)
			require.Contains(t, valid, s)
		}
		if len(s) > MaxTokenSize {
			require.ErrorIs(t, err, ErrTokenMalformed)
		}
		require.Less(t, time.Since(start), time.Second, "verification must be bounded")
	})
}

func BenchmarkMint(b *testing.B) {
	f := newFixture(b)
	id := testIdentity()
	b.ReportAllocs()
	for b.Loop() {
		_, _, err := f.iss.Mint(id)
		require.NoError(b, err)
	}
}

func BenchmarkVerify(b *testing.B) {
	f := newFixture(b)
	tok, _ := f.mint(b)
	b.ReportAllocs()
	for b.Loop() {
		_, err := f.ver.Verify(tok)
		require.NoError(b, err)
	}
}

// TestSignCompactIsGoJose: the token signCompact writes is the one go-jose's
// signer writes for the same key, kid and payload, byte for byte (Ed25519
// signatures are deterministic), for kids that need escaping too.
func TestSignCompactIsGoJose(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	payload := []byte(`{"sub":"run:r1","grants":{"db":"read"}}`)
	for _, kid := range []string{"k1", `we"ird\kid<&>`, "ünï"} {
		signer, err := jose.NewSigner(
			jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: priv, KeyID: kid}},
			(&jose.SignerOptions{}).WithType(TokenType),
		)
		require.NoError(t, err)
		jws, err := signer.Sign(payload)
		require.NoError(t, err)
		want, err := jws.CompactSerialize()
		require.NoError(t, err)
		got, err := signCompact(kid, priv, payload)
		require.NoError(t, err)
		require.Equal(t, want, got, "kid %q", kid)
	}
}

// BenchmarkSignCompact compares the token signing a claim does per attempt
// with go-jose's signer, which it replaced.
func BenchmarkSignCompact(b *testing.B) {
	_, priv, err := ed25519.GenerateKey(nil)
	require.NoError(b, err)
	payload := []byte(`{"iss":"jobplane","aud":"jobplane","sub":"run:run_01","iat":1,"nbf":1,"exp":2,"jti":"x","run_id":"run_01","attempt_id":"att_01","job":"noop","channel":"prod","tenant":"tn","grants":{}}`)
	b.Run("signCompact", func(b *testing.B) {
		for b.Loop() {
			if _, err := signCompact("k1", priv, payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-jose", func(b *testing.B) {
		for b.Loop() {
			signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: priv, KeyID: "k1"}},
				(&jose.SignerOptions{}).WithType(TokenType))
			if err != nil {
				b.Fatal(err)
			}
			jws, err := signer.Sign(payload)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := jws.CompactSerialize(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
