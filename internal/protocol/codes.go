package protocol

// Problem is an RFC 9457 problem+json body with jobplane's stable machine code.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail,omitempty"`
	// Field names the offending input, when there is one (for example a parameter).
	Field string `json:"field,omitempty"`
	// Decision accompanies a 403 denied.
	Decision any `json:"decision,omitempty"`
	// RunID accompanies 409 already_done and 403 denied.
	RunID string `json:"run_id,omitempty"`
	// ServerTime (Unix seconds) accompanies 401 timestamp_skew, so that a
	// runner can correct the timestamps it signs.
	ServerTime int64 `json:"server_time,omitempty"`
}

// Error codes. Each refusal the server makes has exactly one of these.
const (
	CodeBadRequest               = "bad_request"
	CodeUnauthorized             = "unauthorized"
	CodeForbidden                = "forbidden"
	CodeNotFound                 = "not_found"
	CodeTooLarge                 = "too_large"
	CodeRequestTimeout           = "request_timeout"
	CodeRetry                    = "retry"
	CodeInternal                 = "internal"
	CodeUnavailable              = "unavailable"
	CodeSignatureInvalid         = "signature_invalid"
	CodeTimestampSkew            = "timestamp_skew"
	CodeNonceReused              = "nonce_reused"
	CodeRunnerDisabled           = "runner_disabled"
	CodeAttemptStale             = "attempt_stale"
	CodeLeaseExpired             = "lease_expired"
	CodeRegistrationTokenInvalid = "registration_token_invalid"
	CodeResultConflict           = "result_conflict"
	CodeArtifactInvalid          = "artifact_invalid"
	CodeInvalidName              = "invalid_name"
	CodeDenied                   = "denied"
	CodeInvalidParams            = "invalid_params"
	CodeLeaseHeld                = "lease_held"
	CodeAlreadyDone              = "already_done"
	CodeIdempotencyConflict      = "idempotency_conflict"
	CodeInvalidState             = "invalid_state"
	CodeAlreadyExists            = "already_exists"
	CodeUnknownJob               = "unknown_job"
	CodeUnknownChannel           = "unknown_channel"
	CodeCatalogUnavailable       = "catalog_unavailable"
	CodeMethodNotAllowed         = "method_not_allowed"
	CodeSelfApproval             = "self_approval"
	CodeNotAnApprover            = "not_an_approver"
)
