// Package actionsoidc verifies the OIDC tokens GitHub Actions issues to a
// workflow job, for the GitHub Actions compatibility mode.
//
// A workflow dispatched for an attempt presents its token to the server,
// which exchanges it for the attempt's assignment. Everything the exchange
// decides rests on the claims this package returns, so verification is
// strict and fails closed:
//
//   - the signing keys come only from the issuer's published JWKS, found
//     through its OpenID discovery document, whose jwks_uri must be on the
//     issuer's own origin; nothing in the token (jku, jwk, x5u, x5c) selects
//     a key, and a kid the set does not hold triggers at most one refetch
//     a minute;
//   - the algorithm is pinned to RS256, the one GitHub signs with, so
//     "none", HS256 (a public key used as an HMAC secret) and every other
//     algorithm are refused before any key is touched;
//   - iss must equal the configured issuer and aud the configured audience
//     exactly; exp, nbf and iat are checked against the injected clock with
//     a small leeway;
//   - the claims the exchange binds to (repository_id, repository_owner_id,
//     event_name, workflow_ref, ref, sha, run_id, run_attempt, jti) must be
//     present and well formed; ids are decimal strings as GitHub sends them.
//
// Whether those claims match the attempt is the exchange's business, not
// this package's.
package actionsoidc
