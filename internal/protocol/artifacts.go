package protocol

import (
	"net/http"
	"time"
)

// Codes of artifact uploads and source tickets.
const (
	CodeCapabilityExpired  = "capability_expired"
	CodeDigestMismatch     = "digest_mismatch"
	CodeSizeMismatch       = "size_mismatch"
	CodeArtifactUndeclared = "artifact_undeclared"
	CodeTicketExpired      = "ticket_expired"
	CodeSourceUnavailable  = "source_unavailable"
)

// Refusals of artifact uploads and source tickets.
var (
	ErrCapabilityExpired  = newErr(http.StatusGone, CodeCapabilityExpired, "Upload capability used or expired")
	ErrDigestMismatch     = newErr(http.StatusUnprocessableEntity, CodeDigestMismatch, "Digest mismatch")
	ErrSizeMismatch       = newErr(http.StatusUnprocessableEntity, CodeSizeMismatch, "Size mismatch")
	ErrArtifactUndeclared = newErr(http.StatusUnprocessableEntity, CodeArtifactUndeclared, "Artifact not declared by the job")
	ErrTicketExpired      = newErr(http.StatusGone, CodeTicketExpired, "Source ticket used or expired")
	ErrSourceUnavailable  = newErr(http.StatusServiceUnavailable, CodeSourceUnavailable, "Source unavailable")
)

// ArtifactRequest is the body of POST /v1/runner/attempt/artifacts. Size
// (0: not announced) and SHA256 ("": not announced) bind the upload when given.
type ArtifactRequest struct {
	Name   string `json:"name"`
	Role   string `json:"role,omitempty"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// ArtifactCapability answers an artifact request: where to PUT the bytes,
// once, before ExpiresAt.
type ArtifactCapability struct {
	ArtifactID string    `json:"artifact_id"`
	UploadURL  string    `json:"upload_url"`
	MaxBytes   int64     `json:"max_bytes"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// UploadResponse answers PUT /v1/uploads/{capability}.
type UploadResponse struct {
	ArtifactID string `json:"artifact_id"`
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"`
}

// Source answer kinds.
const (
	SourceKindTicket     = "ticket"
	SourceKindDescriptor = "descriptor"
)

// SourceAnswer answers POST /v1/runner/attempt/source: a ticket URL for a
// managed runner, only the repository and commit for a self-hosted one.
type SourceAnswer struct {
	Kind      string     `json:"kind"`
	URL       string     `json:"url,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Repo      string     `json:"repo"`
	Commit    string     `json:"commit"`
}

// Artifact is a stored artifact of a run.
type Artifact struct {
	ID            string    `json:"id"`
	Name          string    `json:"name"`
	Role          string    `json:"role"`
	Size          int64     `json:"size"`
	SHA256        string    `json:"sha256"`
	AttemptID     string    `json:"attempt_id"`
	AttemptNumber int       `json:"attempt_number"`
	StoredAt      time.Time `json:"stored_at"`
}

// ArtifactList answers GET /v1/runs/{id}/artifacts.
type ArtifactList struct {
	Artifacts []Artifact `json:"artifacts"`
}
