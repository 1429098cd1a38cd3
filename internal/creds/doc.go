// Package creds holds jobplane's credential primitives: run tokens (an
// Ed25519-signed JWS per attempt) and the key set that signs and publishes
// them, the secret box that encrypts secret values and signing keys at rest,
// and the server key that box is built from. The masker that scrubs secret
// values out of log lines is package redact.
//
// Everything here is pure: time comes from an injected clock.Clock (or an
// explicit now), persistence goes through the small KeyStore interface, and
// nothing logs a key, a token or a secret value.
//
// # Run tokens
//
// A run token identifies one attempt of one run to the control plane and to
// third parties (Vault, cloud IAM federation) that verify it against the
// published JWKS. The verifier is deliberately narrow (RFC 8725): the
// algorithm is pinned to EdDSA, the type to "jobplane-run+jwt" so that other
// jobplane token kinds can never be replayed as run tokens, the key is chosen
// only by a kid we issued, and any other header (jku, x5u, jwk, x5c, crit, b64,
// ...) is refused outright rather than interpreted. Checks run in a fixed,
// fail-closed order and every refusal wraps ErrTokenInvalid plus a specific
// sentinel, so the API can map it to a 401 problem code.
//
// Verify does NOT know whether the attempt is still live: a token stays
// cryptographically valid until exp even after its run ended or was revoked.
// Callers on the control plane MUST check the attempt (RunID, AttemptID,
// Tenant) against the store before acting on a token (acceptance case T5), and
// must authorise the call against Claims.Grants (T1, T2, T6).
//
// # Keys at rest
//
// Signing keys and secret values are sealed with Box (AES-256-GCM) under the
// server key (JOBPLANE_SECRET_KEY or dataDir/secret.key). The associated data
// binds each ciphertext to what it belongs to (a key's kid; a secret's tenant,
// name and channel), so a row copied to another name does not open.
package creds
