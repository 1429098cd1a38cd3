package protocol

// LeaseList answers GET /v1/leases.
type LeaseList struct {
	Leases []LeaseHolder `json:"leases"`
}

// LeaseReleaseRequest is the body of POST /v1/leases/{key}/release.
type LeaseReleaseRequest struct {
	Reason string `json:"reason"`
}

// LeaseVerifyRequest is the body of POST /v1/leases/verify.
type LeaseVerifyRequest struct {
	Key          string `json:"key"`
	FencingToken int64  `json:"fencing_token"`
}

// LeaseVerification answers POST /v1/leases/verify: whether the fencing
// token is still its key's current holder's, and that holder's run.
type LeaseVerification struct {
	Current bool   `json:"current"`
	RunID   string `json:"run_id"`
}

// SigningKeyRotation answers POST /v1/admin/signing-keys/rotate with the
// new key's ID.
type SigningKeyRotation struct {
	KID string `json:"kid"`
}

// LogEnd is the data of a followed log stream's "end" event: the run's
// final state.
type LogEnd struct {
	RunState string `json:"run_state"`
}
