package problem_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/problem"
	"github.com/jobplane/jobplane/internal/protocol"
)

type denial struct{ run string }

func (d denial) Error() string            { return "denied: no: denied" }
func (d denial) Unwrap() error            { return protocol.ErrDenied }
func (d denial) DeniedRun() (string, any) { return d.run, map[string]bool{"allowed": false} }

func TestOf(t *testing.T) {
	t.Parallel()
	skew := &authn.SkewError{ServerTime: time.Unix(1700000000, 0)}
	for _, c := range []struct {
		name   string
		err    error
		want   protocol.Problem
		failed bool
	}{
		{"refusal", fmt.Errorf("run r1: %w", protocol.ErrNotFound),
			protocol.Problem{Status: 404, Code: "not_found", Title: "Not found", Detail: "run r1"}, false},
		{"driver text cut", fmt.Errorf("x: %w: %w", protocol.ErrUnavailable, errors.New("dial tcp: secret")),
			protocol.Problem{Status: 503, Code: "unavailable", Title: "Unavailable", Detail: "x"}, false},
		{"field", &protocol.FieldError{Field: "job", Err: fmt.Errorf("job is required: %w", protocol.ErrBadRequest)},
			protocol.Problem{Status: 400, Code: "bad_request", Title: "Bad request", Detail: "job is required", Field: "job"}, false},
		{"run ref", &protocol.RunRefError{RunID: "run_1", Err: fmt.Errorf("held by run_1: %w", protocol.ErrLeaseHeld)},
			protocol.Problem{Status: 409, Code: "lease_held", Title: "Lease held", Detail: "held by run_1", RunID: "run_1"}, false},
		{"denial", denial{run: "run_d"},
			protocol.Problem{Status: 403, Code: "denied", Title: "Denied", Detail: "denied: no", RunID: "run_d", Decision: map[string]bool{"allowed": false}}, false},
		{"refused keeps its code", protocol.Refused(protocol.ErrInvalidParams, fmt.Errorf("p: %w", protocol.ErrUnknownJob)),
			protocol.Problem{Status: 422, Code: "invalid_params", Title: "Invalid parameters", Detail: "p: unknown_job"}, false},
		{"skew", fmt.Errorf("x: %w", skewWith(skew)),
			protocol.Problem{Status: 401, Code: "timestamp_skew", Title: "Timestamp skew", Detail: "x: timestamp off", ServerTime: 1700000000}, false},
		{"internal", errors.New("nil pointer"),
			protocol.Problem{Status: 500, Code: "internal", Title: "Internal error"}, true},
	} {
		got, failed := problem.Of(c.err)
		c.want.Type = "about:blank"
		require.Equal(t, c.want, got, c.name)
		require.Equal(t, c.failed, failed, c.name)
	}
}

// skewWith is a skew refusal as authn makes it.
func skewWith(e *authn.SkewError) error {
	return &skewErr{e: e}
}

type skewErr struct{ e *authn.SkewError }

func (s *skewErr) Error() string { return "timestamp off: timestamp_skew" }
func (s *skewErr) Unwrap() []error {
	return []error{protocol.ErrTimestampSkew, s.e}
}
