// Package problem turns the errors the services return into the answers
// of the API (problem+json) and of the web UI: one mapping for both.
//
// A refusal is a *protocol.Error somewhere in the error's chain: its
// status, code and title are the answer's, and the error's text without
// the trailing code is its detail (services turn store failures into
// refusals themselves: store.Refusal). Anything else is a failure to serve
// the request: 500, and the caller logs it.
package problem

import (
	"errors"
	"net/http"
	"strings"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Denial is an error that refuses a run request by policy and names the
// run kept for audit (control.DeniedError).
type Denial interface {
	DeniedRun() (runID string, decision any)
}

// Of is the problem that answers err. failed reports a failure to serve
// the request (500), which the caller logs, rather than a refusal.
func Of(err error) (p protocol.Problem, failed bool) {
	p = protocol.Problem{Type: "about:blank"}
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		// A store error that reached the edge unclassified (a lost
		// connection, a lost commit) is still the retryable refusal it is.
		err = store.Refusal(err)
	}
	if errors.As(err, &pe) {
		p.Status, p.Code, p.Title = pe.Status, pe.Code, pe.Title
		p.Detail = detail(err, pe)
	} else {
		p.Status, p.Code, p.Title = http.StatusInternalServerError, protocol.CodeInternal, "Internal error"
		failed = true
	}
	var fe *protocol.FieldError
	if errors.As(err, &fe) {
		p.Field = fe.Field
	}
	var re *protocol.RunRefError
	if errors.As(err, &re) {
		p.RunID = re.RunID
	}
	var de Denial
	if errors.As(err, &de) {
		p.RunID, p.Decision = de.DeniedRun()
	}
	var se *authn.SkewError
	if errors.As(err, &se) {
		p.ServerTime = se.ServerTime.Unix()
	}
	return p, failed
}

// detail strips the trailing ": code" the sentinel wrapping leaves, and any
// wrapped driver error text after it, so that internals do not leak.
func detail(err error, pe *protocol.Error) string {
	s := err.Error()
	if i := strings.Index(s, ": "+pe.Code); i >= 0 {
		return s[:i]
	}
	if s == pe.Code {
		return ""
	}
	return s
}
