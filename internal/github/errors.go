package github

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinels callers branch on; an *APIError matches the one of its status.
var (
	// ErrUnauthorized: GitHub refused the credential (a bad JWT or an
	// expired token).
	ErrUnauthorized = errors.New("github: unauthorized")
	// ErrForbidden: the credential is valid but lacks a permission, or the
	// installation is suspended.
	ErrForbidden = errors.New("github: forbidden")
	// ErrNotFound: no such resource as far as this credential can see
	// (GitHub answers 404, not 403, for repositories outside a token).
	ErrNotFound = errors.New("github: not found")
	// ErrInvalid: GitHub refused the request's content (422).
	ErrInvalid = errors.New("github: invalid request")
	// ErrUnavailable: GitHub could not be reached or answered 5xx or 429;
	// the request may be retried later.
	ErrUnavailable = errors.New("github: unavailable")
	// ErrSourceMismatch: a tarball does not carry the commit it was asked for.
	ErrSourceMismatch = errors.New("github: source does not match the requested commit")
)

// APIError is a refusal from GitHub's API.
type APIError struct {
	Method  string
	Path    string // without query; never carries a credential
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("github: %s %s: %d %s", e.Method, e.Path, e.Status, e.Message)
}

// Is maps the status to a sentinel.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrInvalid:
		return e.Status == http.StatusUnprocessableEntity || e.Status == http.StatusBadRequest
	case ErrUnavailable:
		return e.Status >= 500 || e.Status == http.StatusTooManyRequests
	}
	return false
}

// Retryable reports whether an error from this package is worth retrying
// later: GitHub was down, rate-limited us, or could not be reached. A
// refusal of the request itself (4xx) is not.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	var ae *APIError
	return !errors.As(err, &ae) && !errors.Is(err, ErrSourceMismatch)
}
