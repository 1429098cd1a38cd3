package store

import (
	"context"
	"time"
)

// ---- artifacts and source tickets ----

// ArtifactState is where an artifact is in its upload.
type ArtifactState string

// Artifact states: a capability was issued (pending), its single use has
// begun (uploading), the bytes were verified and published (stored). A
// refused upload deletes its row.
const (
	ArtifactPending   ArtifactState = "pending"
	ArtifactUploading ArtifactState = "uploading"
	ArtifactStored    ArtifactState = "stored"
)

// Artifact is a file an attempt uploads, from the capability that allows it
// to the stored, verified object.
type Artifact struct {
	ID        string
	Tenant    string
	RunID     string
	AttemptID string
	Name      string
	Role      string
	// MaxBytes bounds the upload; ExpectedSize (0: any) and ExpectedSHA256
	// ("" : any) are what the runner announced.
	MaxBytes       int64
	ExpectedSize   int64
	ExpectedSHA256 string
	// CapabilityDigest is the SHA-256 of the upload capability; the
	// capability itself is never stored.
	CapabilityDigest string
	// LeaseDigest is the attempt lease the capability was issued under;
	// publishing re-checks that it is still the live one.
	LeaseDigest string
	StorageKey  string
	State       ArtifactState
	Size        int64
	SHA256      string
	ExpiresAt   time.Time
	CreatedAt   time.Time // zero: now
	StoredAt    *time.Time
}

// SourceTicket is a single-use right to download one commit of one
// repository, bound to one live attempt lease; only its digest is stored.
type SourceTicket struct {
	Digest      string
	Tenant      string
	RunID       string
	AttemptID   string
	LeaseDigest string
	Repo        string
	Commit      string
	ExpiresAt   time.Time
	UsedAt      *time.Time
	CreatedAt   time.Time // zero: now
}

// ArtifactQueries are the artifact and source ticket methods of Queries.
type ArtifactQueries interface {
	// ArtifactBeginUpload moves the pending, unexpired artifact whose
	// capability digest matches to uploading, in one statement, so that of
	// concurrent uses exactly one wins. ErrNotFound otherwise.
	ArtifactBeginUpload(ctx context.Context, capabilityDigest string, now *time.Time) (*Artifact, error)
	// ArtifactCreate inserts a pending artifact.
	ArtifactCreate(ctx context.Context, a *Artifact) error
	// ArtifactDelete removes an artifact row (ErrNotFound if none).
	ArtifactDelete(ctx context.Context, id string) error
	// ArtifactGetByID reads an artifact.
	ArtifactGetByID(ctx context.Context, id string) (*Artifact, error)
	// ArtifactListByRun lists a run's stored artifacts by attempt, then name.
	ArtifactListByRun(ctx context.Context, runID string) ([]*Artifact, error)
	// ArtifactMarkStored records an uploading artifact's verified size and
	// digest and makes it stored (StoredAt: now when nil). ErrNotFound when
	// it is not uploading; ErrAlreadyExists when the attempt already stored
	// an artifact of that name.
	ArtifactMarkStored(ctx context.Context, a *Artifact) error

	// SourceTicketCreate inserts a ticket.
	SourceTicketCreate(ctx context.Context, t *SourceTicket) error
	// SourceTicketUse marks an unused, unexpired ticket used and returns it,
	// in one statement, so that of concurrent uses exactly one wins.
	// ErrNotFound otherwise.
	SourceTicketUse(ctx context.Context, digest string, now *time.Time) (*SourceTicket, error)
}
