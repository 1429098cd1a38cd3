package protocol

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is a refusal with its HTTP status and stable code. The services return
// these sentinels (wrapped with detail); the API maps them to problem+json in
// one place, and clients can match them with errors.Is.
type Error struct {
	Status int
	Code   string
	Title  string
}

func (e *Error) Error() string { return e.Code }

// Is matches errors by code, so a client-side error decoded from problem+json
// matches the server-side sentinel.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func newErr(status int, code, title string) *Error {
	return &Error{Status: status, Code: code, Title: title}
}

// Sentinel refusals.
var (
	ErrBadRequest               = newErr(http.StatusBadRequest, CodeBadRequest, "Bad request")
	ErrUnauthorized             = newErr(http.StatusUnauthorized, CodeUnauthorized, "Unauthorized")
	ErrForbidden                = newErr(http.StatusForbidden, CodeForbidden, "Forbidden")
	ErrNotFound                 = newErr(http.StatusNotFound, CodeNotFound, "Not found")
	ErrTooLarge                 = newErr(http.StatusRequestEntityTooLarge, CodeTooLarge, "Too large")
	ErrRequestTimeout           = newErr(http.StatusRequestTimeout, CodeRequestTimeout, "Request timeout")
	ErrRetry                    = newErr(http.StatusServiceUnavailable, CodeRetry, "Outcome unknown, retry")
	ErrUnavailable              = newErr(http.StatusServiceUnavailable, CodeUnavailable, "Unavailable")
	ErrSignatureInvalid         = newErr(http.StatusUnauthorized, CodeSignatureInvalid, "Signature invalid")
	ErrTimestampSkew            = newErr(http.StatusUnauthorized, CodeTimestampSkew, "Timestamp skew")
	ErrNonceReused              = newErr(http.StatusUnauthorized, CodeNonceReused, "Nonce reused")
	ErrRunnerDisabled           = newErr(http.StatusForbidden, CodeRunnerDisabled, "Runner disabled")
	ErrAttemptStale             = newErr(http.StatusConflict, CodeAttemptStale, "Attempt stale")
	ErrLeaseExpired             = newErr(http.StatusConflict, CodeLeaseExpired, "Lease expired")
	ErrRegistrationTokenInvalid = newErr(http.StatusUnauthorized, CodeRegistrationTokenInvalid, "Registration token invalid")
	ErrResultConflict           = newErr(http.StatusConflict, CodeResultConflict, "Result conflict")
	ErrArtifactInvalid          = newErr(http.StatusUnprocessableEntity, CodeArtifactInvalid, "Artifact invalid")
	ErrInvalidName              = newErr(http.StatusBadRequest, CodeInvalidName, "Invalid name")
	ErrDenied                   = newErr(http.StatusForbidden, CodeDenied, "Denied")
	ErrInvalidParams            = newErr(http.StatusUnprocessableEntity, CodeInvalidParams, "Invalid parameters")
	ErrIdempotencyConflict      = newErr(http.StatusConflict, CodeIdempotencyConflict, "Idempotency key reused")
	ErrInvalidState             = newErr(http.StatusConflict, CodeInvalidState, "Invalid state")
	ErrAlreadyExists            = newErr(http.StatusConflict, CodeAlreadyExists, "Already exists")
	ErrUnknownJob               = newErr(http.StatusNotFound, CodeUnknownJob, "Unknown job")
	ErrUnknownChannel           = newErr(http.StatusNotFound, CodeUnknownChannel, "Unknown channel")
	ErrCatalogUnavailable       = newErr(http.StatusServiceUnavailable, CodeCatalogUnavailable, "Catalog unavailable")
	ErrLeaseHeld                = newErr(http.StatusConflict, CodeLeaseHeld, "Lease held")
	ErrAlreadyDone              = newErr(http.StatusConflict, CodeAlreadyDone, "Already done")
	ErrSelfApproval             = newErr(http.StatusForbidden, CodeSelfApproval, "Self-approval")
	ErrNotAnApprover            = newErr(http.StatusForbidden, CodeNotAnApprover, "Not an approver")
)

// IsRefusal reports whether err refuses a request (a 4xx problem) rather
// than reporting a failure to serve it.
func IsRefusal(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Status < 500
}

// BodyError is the refusal for a request body that could not be read:
// 408 request_timeout when it did not arrive in time (the server's edge
// wraps ErrRequestTimeout into that read's error), 413 too_large when it
// went over its limit, 400 bad_request otherwise (the client hung up or
// sent a broken chunked body).
func BodyError(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, ErrRequestTimeout):
		return err
	case errors.As(err, &mbe):
		return Refused(ErrTooLarge, fmt.Errorf("body over %d bytes", mbe.Limit))
	}
	return Refused(ErrBadRequest, fmt.Errorf("read body: %w", err))
}

// Refused wraps err as a refusal: its text is err's followed by ": " and
// the refusal's code, errors.Is and errors.As find refusal before anything
// err wraps (the answer is refusal's, whatever err carries), and err's own
// chain stays matchable.
func Refused(refusal *Error, err error) error {
	return &refusedError{refusal: refusal, err: err}
}

type refusedError struct {
	refusal *Error
	err     error
}

func (e *refusedError) Error() string   { return e.err.Error() + ": " + e.refusal.Code }
func (e *refusedError) Unwrap() []error { return []error{e.refusal, e.err} }

// FieldError is a refusal that names the input field at fault (a problem's
// field).
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns the refusal.
func (e *FieldError) Unwrap() error { return e.Err }

// RunRefError is a refusal that points at another run (a problem's run_id:
// 409 lease_held, 409 already_done).
type RunRefError struct {
	RunID string
	Err   error
}

func (e *RunRefError) Error() string { return e.Err.Error() }

// Unwrap returns the refusal.
func (e *RunRefError) Unwrap() error { return e.Err }
