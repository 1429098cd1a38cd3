package protocol

import "net/http"

// Codes of the GitHub Actions compatibility mode: the exchange of a
// workflow's Actions OIDC token for the attempt it was dispatched for
// (POST /v1/actions/exchange) and the dispatch itself.
const (
	// CodeOIDCTokenInvalid: the token is not a well-formed JWS signed by
	// one of the issuer's published keys with the pinned algorithm (RS256).
	CodeOIDCTokenInvalid = "oidc_token_invalid"
	// CodeOIDCIssuerInvalid: iss is not the configured issuer.
	CodeOIDCIssuerInvalid = "oidc_issuer_invalid"
	// CodeOIDCAudienceInvalid: aud is not jobplane's documented audience.
	CodeOIDCAudienceInvalid = "oidc_audience_invalid"
	// CodeOIDCTokenExpired: exp passed, or nbf/iat lie in the future,
	// beyond the leeway.
	CodeOIDCTokenExpired = "oidc_token_expired"
	// CodeOIDCClaimsInvalid: a claim jobplane needs is missing or malformed.
	CodeOIDCClaimsInvalid = "oidc_claims_invalid"
	// CodeOIDCRepositoryMismatch: repository_id or repository_owner_id is
	// not the run's repository and installation.
	CodeOIDCRepositoryMismatch = "oidc_repository_mismatch"
	// CodeOIDCWorkflowMismatch: workflow_ref is not the dispatched workflow
	// file at the dispatched ref.
	CodeOIDCWorkflowMismatch = "oidc_workflow_mismatch"
	// CodeOIDCEventMismatch: event_name is not workflow_dispatch.
	CodeOIDCEventMismatch = "oidc_event_mismatch"
	// CodeOIDCTokenReplayed: the token (jti), or the workflow run and run
	// attempt it names, was already exchanged.
	CodeOIDCTokenReplayed = "oidc_token_replayed"
	// CodeAttemptNotDispatched: the attempt named is unknown, was not
	// dispatched to GitHub Actions, or has ended.
	CodeAttemptNotDispatched = "attempt_not_dispatched"
)

// Refusals of the Actions exchange.
var (
	ErrOIDCTokenInvalid       = newErr(http.StatusUnauthorized, CodeOIDCTokenInvalid, "Actions OIDC token invalid")
	ErrOIDCIssuerInvalid      = newErr(http.StatusUnauthorized, CodeOIDCIssuerInvalid, "Actions OIDC issuer not accepted")
	ErrOIDCAudienceInvalid    = newErr(http.StatusUnauthorized, CodeOIDCAudienceInvalid, "Actions OIDC audience not accepted")
	ErrOIDCTokenExpired       = newErr(http.StatusUnauthorized, CodeOIDCTokenExpired, "Actions OIDC token expired or not yet valid")
	ErrOIDCClaimsInvalid      = newErr(http.StatusUnauthorized, CodeOIDCClaimsInvalid, "Actions OIDC claims invalid")
	ErrOIDCRepositoryMismatch = newErr(http.StatusForbidden, CodeOIDCRepositoryMismatch, "Workflow repository does not match the attempt")
	ErrOIDCWorkflowMismatch   = newErr(http.StatusForbidden, CodeOIDCWorkflowMismatch, "Workflow does not match the dispatch")
	ErrOIDCEventMismatch      = newErr(http.StatusForbidden, CodeOIDCEventMismatch, "Workflow event is not workflow_dispatch")
	ErrOIDCTokenReplayed      = newErr(http.StatusConflict, CodeOIDCTokenReplayed, "Actions OIDC token or workflow run already exchanged")
	ErrAttemptNotDispatched   = newErr(http.StatusConflict, CodeAttemptNotDispatched, "Attempt not dispatched or ended")
)

// ActionsExchangeRequest is the body of POST /v1/actions/exchange. The
// Actions OIDC token travels in the Authorization header (Bearer).
type ActionsExchangeRequest struct {
	// AttemptID is the attempt the workflow was dispatched for (its
	// jobplane_attempt input).
	AttemptID string `json:"attempt_id"`
	// PublicKey is the Ed25519 public key (base64url) the workflow made for
	// this attempt: its signed calls (renew, logs, artifacts, result) are
	// verified with it, as a runner's are. The private key never leaves
	// the workflow's job.
	PublicKey string `json:"public_key"`
}

// ActionsExchangeResponse answers an exchange: the attempt's assignment,
// exactly what a runner's claim returns, and the identity to sign with.
type ActionsExchangeResponse struct {
	// RunnerID identifies the one-attempt credential in signed calls.
	RunnerID   string      `json:"runner_id"`
	Assignment *Assignment `json:"assignment"`
}
