package creds

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/jobplane/jobplane/internal/clock"
)

const (
	// TokenType is the JOSE "typ" of a run token. Other token kinds must use
	// their own typ (e.g. "jobplane-upload+jwt") so that none of them is ever
	// accepted where a run token is expected, and vice versa (RFC 8725 §3.11).
	TokenType = "jobplane-run+jwt"
	// DefaultAudience is the aud of run tokens unless configured otherwise.
	DefaultAudience = "jobplane"
	// MaxTokenSize bounds the work done on untrusted input before any
	// decoding. Real run tokens are well under 2 KiB.
	MaxTokenSize = 8 << 10
	// MaxLeeway is the largest clock tolerance a Verifier accepts
	// (run tokens live at most 30 s).
	MaxLeeway = 30 * time.Second
	// DefaultMaxLifetime caps exp − iat when not configured.
	DefaultMaxLifetime = 6 * time.Hour

	subjectPrefix = "run:"
)

// Access is a connector grant level.
type Access string

// Grant levels. Write implies read; comparing levels is the caller's business.
const (
	AccessRead  Access = "read"
	AccessWrite Access = "write"
)

func (a Access) valid() bool { return a == AccessRead || a == AccessWrite }

// Claims are the verified contents of a run token.
type Claims struct {
	Issuer    string
	Audience  string
	Subject   string // "run:" + RunID
	ID        string // jti
	IssuedAt  time.Time
	NotBefore time.Time // zero if the token has no nbf
	Expiry    time.Time

	RunID     string
	AttemptID string
	Job       string
	Channel   string
	Tenant    string
	// Grants maps connector name to access level; never nil after Verify.
	Grants map[string]Access
}

// wireClaims is the JSON payload. Field order is the serialization order.
type wireClaims struct {
	Iss       string            `json:"iss"`
	Aud       string            `json:"aud"`
	Sub       string            `json:"sub"`
	Iat       int64             `json:"iat"`
	Nbf       int64             `json:"nbf"`
	Exp       int64             `json:"exp"`
	Jti       string            `json:"jti"`
	RunID     string            `json:"run_id"`
	AttemptID string            `json:"attempt_id"`
	Job       string            `json:"job"`
	Channel   string            `json:"channel"`
	Tenant    string            `json:"tenant"`
	Grants    map[string]Access `json:"grants"`
}

// SigningKeys yields the key that signs new tokens. KeySet implements it.
type SigningKeys interface {
	SigningKey() (kid string, key ed25519.PrivateKey, err error)
}

// PublicKeys resolves a kid to a verification key. KeySet implements it.
type PublicKeys interface {
	PublicKey(kid string) (ed25519.PublicKey, bool)
}

// IssuerConfig configures an Issuer.
type IssuerConfig struct {
	// Issuer is the server's external URL, the iss claim.
	Issuer string
	// Audience defaults to DefaultAudience.
	Audience string
	// MaxLifetime caps exp − iat; it is truncated to whole seconds because
	// JWT times are. Defaults to DefaultMaxLifetime.
	MaxLifetime time.Duration
	Clock       clock.Clock
	Keys        SigningKeys
}

// Issuer mints run tokens.
type Issuer struct {
	cfg IssuerConfig
}

// NewIssuer validates cfg and returns an Issuer.
func NewIssuer(cfg IssuerConfig) (*Issuer, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("creds: issuer URL required")
	}
	if cfg.Audience == "" {
		cfg.Audience = DefaultAudience
	}
	if cfg.MaxLifetime == 0 {
		cfg.MaxLifetime = DefaultMaxLifetime
	}
	cfg.MaxLifetime = cfg.MaxLifetime.Truncate(time.Second)
	if cfg.MaxLifetime < time.Second {
		return nil, errors.New("creds: max token lifetime must be at least 1s")
	}
	if cfg.Clock == nil || cfg.Keys == nil {
		return nil, errors.New("creds: clock and keys required")
	}
	return &Issuer{cfg: cfg}, nil
}

// RunIdentity is what a run token asserts; the control plane fills it from
// the claimed attempt, never from runner input.
type RunIdentity struct {
	RunID     string
	AttemptID string
	Job       string
	Channel   string
	Tenant    string
	Grants    map[string]Access
	// Deadline of the attempt (required; zero is refused): exp is never
	// later than this.
	Deadline time.Time
}

// Mint signs a token for id. exp = min(now + MaxLifetime, Deadline), both
// rounded down to whole seconds so that exp never exceeds the deadline.
func (i *Issuer) Mint(id RunIdentity) (string, Claims, error) {
	if id.RunID == "" || id.AttemptID == "" || id.Tenant == "" {
		return "", Claims{}, errors.New("creds: run, attempt and tenant required")
	}
	for name, a := range id.Grants {
		if name == "" || !a.valid() {
			return "", Claims{}, fmt.Errorf("creds: invalid grant for connector %q", name)
		}
	}
	now := i.cfg.Clock.Now()
	iat := now.Unix()
	exp := now.Add(i.cfg.MaxLifetime).Unix()
	if d := id.Deadline.Unix(); id.Deadline.IsZero() || d < exp {
		exp = d
	}
	if exp <= iat {
		return "", Claims{}, ErrDeadlinePassed
	}
	kid, priv, err := i.cfg.Keys.SigningKey()
	if err != nil {
		return "", Claims{}, err
	}
	grants := maps.Clone(id.Grants)
	if grants == nil {
		grants = map[string]Access{}
	}
	wc := wireClaims{
		Iss: i.cfg.Issuer, Aud: i.cfg.Audience, Sub: subjectPrefix + id.RunID,
		Iat: iat, Nbf: iat, Exp: exp, Jti: randomID(),
		RunID: id.RunID, AttemptID: id.AttemptID, Job: id.Job, Channel: id.Channel, Tenant: id.Tenant,
		Grants: grants,
	}
	payload, err := json.Marshal(wc)
	if err != nil {
		return "", Claims{}, err
	}
	tok, err := signCompact(kid, priv, payload)
	if err != nil {
		return "", Claims{}, err
	}
	return tok, wc.claims(), nil
}

// signCompact is the compact JWS of payload signed with EdDSA under kid,
// typed TokenType: what go-jose's signer makes, without building a signer
// and a JSON header by reflection for each token (a run token is minted
// for every claimed attempt). Verify still parses with go-jose, so a token
// this writes and go-jose cannot read fails the round-trip tests.
func signCompact(kid string, priv ed25519.PrivateKey, payload []byte) (string, error) {
	kidJSON, err := json.Marshal(kid)
	if err != nil {
		return "", err
	}
	header := `{"alg":"EdDSA","kid":` + string(kidJSON) + `,"typ":"` + TokenType + `"}`
	enc := base64.RawURLEncoding
	n := enc.EncodedLen(len(header)) + 1 + enc.EncodedLen(len(payload))
	buf := make([]byte, n, n+1+enc.EncodedLen(ed25519.SignatureSize))
	enc.Encode(buf, []byte(header))
	h := enc.EncodedLen(len(header))
	buf[h] = '.'
	enc.Encode(buf[h+1:], payload)
	sig := ed25519.Sign(priv, buf)
	buf = append(buf, '.')
	buf = enc.AppendEncode(buf, sig)
	return string(buf), nil
}

func (w wireClaims) claims() Claims {
	c := Claims{
		Issuer: w.Iss, Audience: w.Aud, Subject: w.Sub, ID: w.Jti,
		IssuedAt: time.Unix(w.Iat, 0).UTC(), Expiry: time.Unix(w.Exp, 0).UTC(),
		RunID: w.RunID, AttemptID: w.AttemptID, Job: w.Job, Channel: w.Channel, Tenant: w.Tenant,
		Grants: w.Grants,
	}
	if w.Nbf != 0 {
		c.NotBefore = time.Unix(w.Nbf, 0).UTC()
	}
	if c.Grants == nil {
		c.Grants = map[string]Access{}
	}
	return c
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it aborts instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Issuer is the expected iss (the server's external URL).
	Issuer string
	// Audience is the expected aud; defaults to DefaultAudience.
	Audience string
	// MaxLifetime refuses tokens with exp − iat above it; defaults to
	// DefaultMaxLifetime. Use the Issuer's value.
	MaxLifetime time.Duration
	// Leeway tolerates clock skew on exp, nbf and iat; 0 means MaxLeeway;
	// more than MaxLeeway is a configuration error. Negative means none.
	Leeway time.Duration
	Clock  clock.Clock
	Keys   PublicKeys
}

// Verifier checks run tokens. It is safe for concurrent use if Keys is.
type Verifier struct {
	cfg VerifierConfig
}

// NewVerifier validates cfg and returns a Verifier.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("creds: issuer URL required")
	}
	if cfg.Audience == "" {
		cfg.Audience = DefaultAudience
	}
	if cfg.MaxLifetime == 0 {
		cfg.MaxLifetime = DefaultMaxLifetime
	}
	switch {
	case cfg.Leeway == 0:
		cfg.Leeway = MaxLeeway
	case cfg.Leeway < 0:
		cfg.Leeway = 0
	case cfg.Leeway > MaxLeeway:
		return nil, fmt.Errorf("creds: leeway %s exceeds the maximum %s", cfg.Leeway, MaxLeeway)
	}
	if cfg.Clock == nil || cfg.Keys == nil {
		return nil, errors.New("creds: clock and keys required")
	}
	return &Verifier{cfg: cfg}, nil
}

// allowedHeaders is an allow-list: anything else (jku, x5u, jwk, x5c, crit,
// b64, cty, x5t, ...) is refused rather than interpreted, because each such
// parameter either points the verifier at attacker-chosen keys or changes how
// the signature is computed.
var allowedHeaders = map[string]bool{"alg": true, "typ": true, "kid": true}

// Verify checks token and returns its claims. Order (fail closed, cheapest
// and most dangerous first): size, compact form, header (alg, typ, allowed
// parameters, kid known), signature, then claims (iss, aud, sub, required
// fields, exp/nbf/iat against the leeway, lifetime).
//
// Verify does not check that the attempt is still live or not revoked:
// callers MUST do that against the store (acceptance case T5).
func (v *Verifier) Verify(token string) (*Claims, error) {
	if len(token) > MaxTokenSize {
		return nil, tokenErr(ErrTokenMalformed, "too large")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return nil, tokenErr(ErrTokenMalformed, "not a compact JWS")
	}
	for _, p := range parts {
		if !isBase64URL(p) {
			return nil, tokenErr(ErrTokenMalformed, "bad base64url")
		}
	}
	headerJSON, err := base64.RawURLEncoding.Strict().DecodeString(parts[0])
	if err != nil {
		return nil, tokenErr(ErrTokenMalformed, "bad header encoding")
	}
	header, err := strictObject(headerJSON)
	if err != nil {
		return nil, tokenErr(ErrTokenMalformed, "bad header JSON")
	}
	for name := range header {
		if !allowedHeaders[name] {
			return nil, tokenErr(ErrTokenHeader, fmt.Sprintf("header parameter %q not allowed", name))
		}
	}
	if s, ok := jsonString(header["alg"]); !ok || s != string(jose.EdDSA) {
		return nil, tokenErr(ErrTokenHeader, "alg must be EdDSA")
	}
	if s, ok := jsonString(header["typ"]); !ok || s != TokenType {
		return nil, tokenErr(ErrTokenHeader, "typ must be "+TokenType)
	}
	kid, ok := jsonString(header["kid"])
	if !ok || kid == "" {
		return nil, tokenErr(ErrTokenHeader, "kid required")
	}
	pub, ok := v.cfg.Keys.PublicKey(kid)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, tokenErr(ErrTokenUnknownKey, "unknown kid")
	}
	// Signature through go-jose with the algorithm pinned and the key given
	// directly (not a key set), so nothing in the token selects the key.
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, tokenErr(ErrTokenMalformed, "unparsable JWS")
	}
	payload, err := jws.Verify(pub)
	if err != nil {
		return nil, tokenErr(ErrTokenSignature, "signature does not verify")
	}
	return v.checkClaims(payload)
}

func (v *Verifier) checkClaims(payload []byte) (*Claims, error) {
	obj, err := strictObject(payload)
	if err != nil {
		return nil, tokenErr(ErrTokenMalformed, "bad claims JSON")
	}
	str := func(name string, required bool) (string, error) {
		raw, present := obj[name]
		if !present {
			if required {
				return "", tokenErr(ErrTokenClaims, name+" missing")
			}
			return "", nil
		}
		s, ok := jsonString(raw)
		if !ok || (required && s == "") {
			return "", tokenErr(ErrTokenClaims, name+" must be a non-empty string")
		}
		return s, nil
	}
	num := func(name string, required bool) (int64, bool, error) {
		raw, present := obj[name]
		if !present {
			if required {
				return 0, false, tokenErr(ErrTokenClaims, name+" missing")
			}
			return 0, false, nil
		}
		n, ok := jsonInt(raw)
		if !ok {
			return 0, false, tokenErr(ErrTokenClaims, name+" must be an integer NumericDate")
		}
		return n, true, nil
	}
	var w wireClaims
	if w.Iss, err = str("iss", true); err != nil {
		return nil, err
	}
	if w.Iss != v.cfg.Issuer {
		return nil, tokenErr(ErrTokenClaims, "wrong iss")
	}
	// aud must be exactly one string: an array would let a token minted for
	// several audiences pass here (RFC 7519 allows both; we mint only one).
	if w.Aud, err = str("aud", true); err != nil {
		return nil, err
	}
	if w.Aud != v.cfg.Audience {
		return nil, tokenErr(ErrTokenClaims, "wrong aud")
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"sub", &w.Sub}, {"jti", &w.Jti}, {"run_id", &w.RunID}, {"attempt_id", &w.AttemptID}, {"tenant", &w.Tenant}} {
		if *f.dst, err = str(f.name, true); err != nil {
			return nil, err
		}
	}
	if w.Sub != subjectPrefix+w.RunID {
		return nil, tokenErr(ErrTokenClaims, "sub does not match run_id")
	}
	if w.Job, err = str("job", false); err != nil {
		return nil, err
	}
	if w.Channel, err = str("channel", false); err != nil {
		return nil, err
	}
	if raw, ok := obj["grants"]; ok {
		if err := json.Unmarshal(raw, &w.Grants); err != nil {
			return nil, tokenErr(ErrTokenClaims, "grants must be an object of strings")
		}
		for name, a := range w.Grants {
			if name == "" || !a.valid() {
				return nil, tokenErr(ErrTokenClaims, "grant level must be read or write")
			}
		}
	}
	exp, _, err := num("exp", true)
	if err != nil {
		return nil, err
	}
	iat, _, err := num("iat", true)
	if err != nil {
		return nil, err
	}
	nbf, hasNbf, err := num("nbf", false)
	if err != nil {
		return nil, err
	}
	w.Exp, w.Iat, w.Nbf = exp, iat, nbf

	now := v.cfg.Clock.Now()
	lw := v.cfg.Leeway
	if now.After(time.Unix(exp, 0).Add(lw)) {
		return nil, tokenErr(ErrTokenExpired, "exp passed")
	}
	if hasNbf && time.Unix(nbf, 0).After(now.Add(lw)) {
		return nil, tokenErr(ErrTokenNotYetValid, "nbf in the future")
	}
	if time.Unix(iat, 0).After(now.Add(lw)) {
		return nil, tokenErr(ErrTokenNotYetValid, "iat in the future")
	}
	if exp <= iat || (hasNbf && nbf > exp) {
		return nil, tokenErr(ErrTokenClaims, "exp not after iat/nbf")
	}
	if time.Duration(exp-iat)*time.Second > v.cfg.MaxLifetime {
		return nil, tokenErr(ErrTokenLifetime, "exp - iat exceeds the maximum")
	}
	c := w.claims()
	if !hasNbf {
		c.NotBefore = time.Time{}
	}
	return &c, nil
}

func isBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// strictObject decodes a JSON object, refusing duplicate member names and
// trailing data. Duplicates matter: two parsers that resolve {"alg":"EdDSA",
// "alg":"none"} differently are the classic confusion attack.
func strictObject(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not an object")
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("bad key")
		}
		if _, dup := out[key]; dup {
			return nil, errors.New("duplicate member")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out[key] = raw
	}
	if _, err := dec.Token(); err != nil { // closing '}'
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return out, nil
}

func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonInt accepts only integral JSON numbers within a sane range (we mint
// integers; fractions and exponents are refused rather than rounded).
func jsonInt(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || !(raw[0] == '-' || ('0' <= raw[0] && raw[0] <= '9')) {
		return 0, false
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	i, err := n.Int64()
	if err != nil || i < 0 || i > math.MaxInt64/int64(time.Second) {
		return 0, false
	}
	return i, true
}
