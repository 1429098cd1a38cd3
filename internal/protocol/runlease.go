package protocol

import (
	"net/http"
	"time"
)

// CodeAttemptEnded refuses GET /v1/run/lease for an attempt that no longer
// holds its lease: its job must stop.
const CodeAttemptEnded = "attempt_ended"

// ErrAttemptEnded is GET /v1/run/lease's answer for an ended attempt.
var ErrAttemptEnded = newErr(http.StatusGone, CodeAttemptEnded, "Attempt ended")

// RunLease answers GET /v1/run/lease: the current lease of the run token's
// attempt. RemainingMS is ExpiresAt less the server's ServerTime, so that a
// caller whose clock is not the server's can still bound the lease by its
// own monotonic clock from when it sent the request.
type RunLease struct {
	AttemptID   string    `json:"attempt_id"`
	State       string    `json:"state"`
	ExpiresAt   time.Time `json:"expires_at"`
	ServerTime  time.Time `json:"server_time"`
	RemainingMS int64     `json:"remaining_ms"`
	TTLSeconds  int       `json:"ttl_seconds"`
}
