package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/jobplane/jobplane/internal/protocol"
)

// APIError is a non-2xx answer of the server.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Problem is the decoded problem+json body. When the answer was not
	// problem+json (a proxy's error page, say), Code is empty and Detail holds
	// the start of the body.
	Problem protocol.Problem
}

// Error returns "code: detail", falling back to the HTTP status when the
// server gave no code.
func (e *APIError) Error() string {
	code := e.Problem.Code
	if code == "" {
		code = fmt.Sprintf("http %d", e.Status)
	}
	detail := e.Problem.Detail
	if detail == "" {
		detail = e.Problem.Title
	}
	if detail == "" {
		detail = http.StatusText(e.Status)
	}
	return code + ": " + detail
}

// IsCode reports whether err is (or wraps) an *APIError with the given
// problem code.
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Problem.Code == code
}

// StatusOf returns the HTTP status of an *APIError in err's chain, or 0.
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// Retryable reports whether repeating the same request may succeed: transport
// failures (the answer may have been lost), 5xx (including 503 retry, whose
// outcome the server does not know), 408 and 429. A context cancellation is
// not retryable: the caller gave up. Repeat a mutating request with the same
// request_id so that a lost answer is returned, not executed twice.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusRequestTimeout || ae.Status == http.StatusTooManyRequests
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	// Anything else below the HTTP layer (connection refused, reset, EOF in
	// the middle of an answer, a per-request timeout) is a transport failure.
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, context.DeadlineExceeded) || isTransport(err)
}

// transportError marks a failure of the round trip itself.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

func isTransport(err error) bool {
	var te *transportError
	return errors.As(err, &te)
}

// maxErrorBody bounds what is read of an error answer.
const maxErrorBody = 64 << 10

// decodeError turns a non-2xx answer into an *APIError.
func decodeError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	ae := &APIError{Status: resp.StatusCode}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		if err := json.Unmarshal(body, &ae.Problem); err == nil && (ae.Problem.Code != "" || mt == "application/problem+json") {
			if ae.Problem.Status == 0 {
				ae.Problem.Status = resp.StatusCode
			}
			return ae
		}
		ae.Problem = protocol.Problem{}
	}
	ae.Problem.Status = resp.StatusCode
	ae.Problem.Title = http.StatusText(resp.StatusCode)
	ae.Problem.Detail = strings.TrimSpace(string(body[:min(len(body), 512)]))
	return ae
}
