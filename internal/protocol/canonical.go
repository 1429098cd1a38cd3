package protocol

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// SignatureVersion is the first line of every canonical message.
const SignatureVersion = "JOBPLANE-RUNNER-V1"

// SignedRequest is everything a runner signature covers.
type SignedRequest struct {
	Method    string
	Path      string // exactly as sent; must be normalized
	RawQuery  string // as sent; canonicalized by CanonicalQuery
	Timestamp string // Unix seconds, decimal
	Nonce     string
	Runner    string
	Run       string
	Attempt   string
	Lease     string // the lease token itself; the message carries its digest
	Body      []byte
}

// Errors of canonicalization. Both mean "refuse the request".
var (
	ErrPathNotCanonical  = errors.New("path is not canonical")
	ErrQueryNotCanonical = errors.New("query is malformed")
	ErrFieldNotCanonical = errors.New("a signed field contains a line break")
)

// CheckPath accepts only paths that every layer reads the same way: absolute,
// no empty, "." or ".." segments, and none of the characters that routers,
// proxies and decoders disagree on (percent-escapes, backslash, ';', control
// characters, non-ASCII). Runner routes never need any of them.
func CheckPath(p string) error {
	if p == "" || p[0] != '/' {
		return ErrPathNotCanonical
	}
	if p == "/" {
		return nil
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c <= 0x20 || c >= 0x7f || c == '%' || c == '\\' || c == ';' || c == '?' || c == '#' {
			return ErrPathNotCanonical
		}
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return ErrPathNotCanonical
		}
	}
	return nil
}

// CanonicalQuery sorts the parameters by key, then value, and encodes them as
// url.Values.Encode does. A query that does not parse is refused rather than
// guessed at.
func CanonicalQuery(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	v, err := url.ParseQuery(raw)
	if err != nil {
		return "", ErrQueryNotCanonical
	}
	for _, vals := range v {
		sort.Strings(vals)
	}
	return v.Encode(), nil
}

// SHA256Hex is the lowercase hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// CanonicalMessage builds the 11-line message of the protocol (docs/protocol.md).
func CanonicalMessage(r *SignedRequest) (string, error) {
	if err := CheckPath(r.Path); err != nil {
		return "", err
	}
	q, err := CanonicalQuery(r.RawQuery)
	if err != nil {
		return "", err
	}
	// A line break inside a field would let two different requests share one
	// message ("a\nb","c" and "a","b\nc"); refuse it rather than escape it.
	for _, f := range []string{r.Method, r.Timestamp, r.Nonce, r.Runner, r.Run, r.Attempt} {
		if strings.ContainsAny(f, "\r\n") {
			return "", ErrFieldNotCanonical
		}
	}
	lease := ""
	if r.Lease != "" {
		lease = SHA256Hex([]byte(r.Lease))
	}
	lines := []string{
		SignatureVersion,
		strings.ToUpper(r.Method),
		r.Path,
		q,
		r.Timestamp,
		r.Nonce,
		r.Runner,
		r.Run,
		r.Attempt,
		lease,
		SHA256Hex(r.Body),
	}
	return strings.Join(lines, "\n"), nil
}

// Sign returns the base64url signature of the canonical message of r.
func Sign(key ed25519.PrivateKey, r *SignedRequest) (string, error) {
	msg, err := CanonicalMessage(r)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, []byte(msg))), nil
}

// Verify reports whether sig (base64url) is pub's signature of r's canonical
// message. It never panics on malformed keys or signatures.
func Verify(pub []byte, r *SignedRequest, sig string) bool {
	if len(pub) != ed25519.PublicKeySize {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return false
	}
	msg, err := CanonicalMessage(r)
	if err != nil {
		return false
	}
	return ed25519.Verify(ed25519.PublicKey(pub), []byte(msg), raw)
}

// ValidNonce reports whether n is 22–64 characters of the base64url alphabet.
func ValidNonce(n string) bool {
	if len(n) < 22 || len(n) > 64 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// DecodePublicKey decodes a base64url Ed25519 public key and checks its length,
// because ed25519.Verify panics on a key of the wrong size.
func DecodePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("public key is not base64url without padding")
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, errors.New("public key is not 32 bytes")
	}
	return ed25519.PublicKey(b), nil
}

// EncodeKey encodes a key as base64url without padding.
func EncodeKey(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// NormLabels is a runner's labels as the server keeps them: sorted, without
// duplicates, never nil.
func NormLabels(l []string) []string {
	out := slices.Clone(l)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	return out
}
