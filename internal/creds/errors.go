package creds

import (
	"errors"
	"fmt"
)

// Token refusals. Every error Verify returns wraps ErrTokenInvalid and,
// except for a generic refusal, one of the more specific sentinels, so a
// caller can test either errors.Is(err, ErrTokenInvalid) ("401 and stop") or
// a specific one (to choose the problem code).
var (
	// ErrTokenInvalid is wrapped by every refusal.
	ErrTokenInvalid = errors.New("run token invalid")
	// ErrTokenMalformed: not a bounded compact JWS, bad base64url or JSON.
	ErrTokenMalformed = errors.New("run token malformed")
	// ErrTokenHeader: alg, typ or a forbidden/unknown header parameter.
	ErrTokenHeader = errors.New("run token header refused")
	// ErrTokenUnknownKey: the kid is not in the key set (unknown or pruned).
	ErrTokenUnknownKey = errors.New("run token key unknown")
	// ErrTokenSignature: the signature does not verify.
	ErrTokenSignature = errors.New("run token signature invalid")
	// ErrTokenClaims: a required claim is missing or has the wrong shape,
	// or iss/aud/sub do not match.
	ErrTokenClaims = errors.New("run token claims invalid")
	// ErrTokenExpired: exp is past by more than the leeway.
	ErrTokenExpired = errors.New("run token expired")
	// ErrTokenNotYetValid: nbf or iat is in the future by more than the leeway.
	ErrTokenNotYetValid = errors.New("run token not yet valid")
	// ErrTokenLifetime: exp − iat exceeds the configured maximum.
	ErrTokenLifetime = errors.New("run token lifetime too long")
)

// Errors of the other primitives.
var (
	// ErrNoSigningKey: the key set has no active (unretired) key.
	ErrNoSigningKey = errors.New("no active signing key")
	// ErrDeadlinePassed: a token was requested for an attempt whose deadline
	// is not in the future.
	ErrDeadlinePassed = errors.New("attempt deadline already passed")
	// ErrSealedInvalid: a sealed value did not open (wrong key, wrong
	// associated data, tampered or truncated). Deliberately one error: which
	// of these it was is of no use to anyone but an attacker.
	ErrSealedInvalid = errors.New("sealed value invalid")
)

// tokenErr wraps ErrTokenInvalid and a specific sentinel. The detail never
// contains the token or any claim value taken verbatim from it beyond names.
func tokenErr(kind error, detail string) error {
	if kind == ErrTokenInvalid {
		return fmt.Errorf("%w: %s", ErrTokenInvalid, detail)
	}
	return fmt.Errorf("%w: %w: %s", ErrTokenInvalid, kind, detail)
}

// ProblemCode maps a Verify error to a stable machine code for a 401
// problem body. Unknown errors map to "token_invalid".
func ProblemCode(err error) string {
	switch {
	case errors.Is(err, ErrTokenExpired):
		return "token_expired"
	case errors.Is(err, ErrTokenNotYetValid):
		return "token_not_yet_valid"
	default:
		return "token_invalid"
	}
}
