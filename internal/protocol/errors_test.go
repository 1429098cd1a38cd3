package protocol_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

// TestRefused: a refusal wrapping a cause answers with its own status and
// code even when the cause carries another refusal, and keeps the cause
// matchable and its text.
func TestRefused(t *testing.T) {
	t.Parallel()
	cause := fmt.Errorf("no job %q: %w", "x", protocol.ErrUnknownJob)
	err := protocol.Refused(protocol.ErrInvalidParams, fmt.Errorf("params: %w", cause))
	require.Equal(t, `params: no job "x": unknown_job: invalid_params`, err.Error())
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, protocol.CodeInvalidParams, pe.Code, "errors.As(Refused(...)) = %s, want the refusal's code", pe.Code)
	require.ErrorIs(t, err, protocol.ErrInvalidParams)
	require.ErrorIs(t, err, protocol.ErrUnknownJob, "the cause's chain is lost")
	require.ErrorIs(t, err, cause)

	wrapped := fmt.Errorf("item: %w", err)
	require.ErrorAs(t, wrapped, &pe)
	require.Equal(t, protocol.CodeInvalidParams, pe.Code)
	require.False(t, errors.Is(err, protocol.ErrBadRequest))
}

func TestIsRefusal(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		fmt.Errorf("x: %w", protocol.ErrLeaseHeld):                    true,
		fmt.Errorf("x: %w", protocol.ErrUnavailable):                  false,
		errors.New("boom"):                                            false,
		&protocol.FieldError{Field: "f", Err: protocol.ErrBadRequest}: true,
	} {
		require.Equal(t, want, protocol.IsRefusal(err), "IsRefusal(%v)", err)
	}
}

// TestBodyError: a body that did not arrive in time is 408
// request_timeout, one over its limit 413 too_large, any other failure
// to read it 400 bad_request.
func TestBodyError(t *testing.T) {
	t.Parallel()
	code := func(err error) string {
		var pe *protocol.Error
		require.ErrorAs(t, err, &pe)
		return fmt.Sprintf("%d %s", pe.Status, pe.Code)
	}
	slow := fmt.Errorf("multipart: NextPart: %w", fmt.Errorf("the body did not arrive within 30s: %w", protocol.ErrRequestTimeout))
	require.Equal(t, "408 request_timeout", code(protocol.BodyError(slow)))
	require.Equal(t, "413 too_large", code(protocol.BodyError(fmt.Errorf("read: %w", &http.MaxBytesError{Limit: 10}))))
	require.Equal(t, "400 bad_request", code(protocol.BodyError(errors.New("unexpected EOF"))))
}
