package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/failpoint"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Defaults of artifact uploads and source tickets (docs/artifacts.md).
const (
	DefaultArtifactMaxBytes = 100 << 20
	DefaultUploadTTL        = 5 * time.Minute
	DefaultTicketTTL        = 2 * time.Minute
	DefaultUploadTimeout    = 15 * time.Minute
)

// ArtifactConfig configures artifact uploads and source tickets. Without a
// Storage, capability requests are refused as unavailable; without Sources,
// jobs with a source cannot be requested.
type ArtifactConfig struct {
	Storage artifact.Storage
	Sources SourceBroker
	// UploadTTL is how long an upload capability may wait for its use.
	UploadTTL time.Duration
	// TicketTTL is how long a source ticket may wait for its use.
	TicketTTL time.Duration
	// UploadTimeout bounds the time an upload's body may take to arrive
	// (a trickling client is cut off then).
	UploadTimeout time.Duration
}

// SourceBroker pins and archives commits of the configured source
// repositories (implemented by internal/source).
type SourceBroker interface {
	// Head returns the commit a branch of a repository points at.
	Head(repo, branch string) (string, error)
	// Archive verifies the commit and writes a gzipped tar of it to the
	// writer open returns; open is not called when verification fails.
	Archive(ctx context.Context, repo, commit string, open func() io.Writer) error
}

func (c ArtifactConfig) uploadTTL() time.Duration { return orDefault(c.UploadTTL, DefaultUploadTTL) }
func (c ArtifactConfig) ticketTTL() time.Duration { return orDefault(c.TicketTTL, DefaultTicketTTL) }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// UploadTimeout is how long an upload's body may take.
func (s *Service) UploadTimeout() time.Duration {
	return orDefault(s.art.UploadTimeout, DefaultUploadTimeout)
}

// claimArtifacts lists the declared artifacts for a claim answer.
func (sp Spec) claimArtifacts() []protocol.ArtifactSpec {
	out := make([]protocol.ArtifactSpec, 0, len(sp.Artifacts))
	for _, a := range sp.Artifacts {
		if a.MaxBytes <= 0 {
			a.MaxBytes = DefaultArtifactMaxBytes
		}
		out = append(out, a)
	}
	return out
}

// claimSource is the claim answer's source descriptor.
func (sp Spec) claimSource() *protocol.SourceDescriptor {
	if sp.Source == nil {
		return nil
	}
	return &protocol.SourceDescriptor{Repo: sp.Source.Repo, Commit: sp.Source.Commit}
}

var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// RequestUpload issues a single-use upload capability for an artifact the
// attempt's job declares.
func (s *Service) RequestUpload(ctx context.Context, call *authn.SignedCall, req *protocol.ArtifactRequest) (*protocol.ArtifactCapability, error) {
	if err := artifact.ValidName(req.Name); err != nil {
		return nil, fmt.Errorf("name %s: %w", strings.TrimPrefix(err.Error(), artifact.ErrInvalidName.Error()+": "), protocol.ErrInvalidName)
	}
	// Lowercase hex is the protocol's form; upper case is the same digest,
	// and refusing it would be a false positive (RELIABILITY rule 7).
	want := strings.ToLower(req.SHA256)
	if want != "" && !sha256HexRE.MatchString(want) {
		return nil, fmt.Errorf("sha256 must be 64 hex digits of a SHA-256, without an algorithm label: %w", protocol.ErrBadRequest)
	}
	if req.Size < 0 {
		return nil, fmt.Errorf("size must not be negative: %w", protocol.ErrBadRequest)
	}
	if s.art.Storage == nil {
		return nil, fmt.Errorf("this server stores no artifacts: %w", protocol.ErrUnavailable)
	}
	capability := id.Secret(32)
	var out *protocol.ArtifactCapability
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		a, r, now, err := s.checkAttempt(ctx, tx, call)
		if errors.Is(err, errEnded) {
			return fmt.Errorf("attempt %s already ended: %w", a.ID, protocol.ErrAttemptStale)
		}
		if err != nil {
			return err
		}
		spec, err := runSpec(r)
		if err != nil {
			return err
		}
		var decl *protocol.ArtifactSpec
		for _, d := range spec.claimArtifacts() {
			if d.Name == req.Name {
				decl = &d
				break
			}
		}
		if decl == nil {
			return fmt.Errorf("job %s declares no artifact %q: %w", r.Job, req.Name, protocol.ErrArtifactUndeclared)
		}
		if req.Role != "" && req.Role != decl.Role {
			return fmt.Errorf("role of artifact %s is %q as declared, not %q: %w", req.Name, decl.Role, req.Role, protocol.ErrBadRequest)
		}
		if req.Size > decl.MaxBytes {
			return fmt.Errorf("artifact %s may have at most %d bytes, %d announced: %w", req.Name, decl.MaxBytes, req.Size, protocol.ErrTooLarge)
		}
		key, err := artifact.Key(r.Tenant, r.ID, a.ID, req.Name)
		if err != nil {
			return protocol.Refused(protocol.ErrInvalidName, err)
		}
		expires := now.Add(s.art.uploadTTL())
		if a.Deadline != nil && a.Deadline.Before(expires) {
			expires = *a.Deadline
		}
		art := &store.Artifact{
			ID: id.New("art_", now), Tenant: r.Tenant, RunID: r.ID, AttemptID: a.ID, Name: req.Name, Role: decl.Role,
			MaxBytes: decl.MaxBytes, ExpectedSize: req.Size, ExpectedSHA256: want,
			CapabilityDigest: protocol.SHA256Hex([]byte(capability)), LeaseDigest: a.LeaseDigest,
			StorageKey: key, State: store.ArtifactPending, ExpiresAt: expires, CreatedAt: s.nowValue(),
		}
		if err := tx.ArtifactCreate(ctx, art); err != nil {
			return err
		}
		out = &protocol.ArtifactCapability{ArtifactID: art.ID, UploadURL: s.apiURL + "/v1/uploads/" + capability,
			MaxBytes: art.MaxBytes, ExpiresAt: expires.UTC()}
		if art.ExpectedSize > 0 {
			out.MaxBytes = art.ExpectedSize
		}
		return s.audit(ctx, tx, r.Tenant, "runner:"+call.Runner.ID, "artifact.capability_issued", r.ID,
			map[string]any{"attempt": a.ID, "artifact": art.ID, "name": art.Name, "max_bytes": out.MaxBytes, "expires_at": expires.UTC()})
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	return out, nil
}

// Upload receives the bytes of an upload capability: it begins the single
// use, streams the body into staging while hashing it and cutting it off
// past the limit, checks size and digest, re-checks the attempt's live
// lease, and only then publishes. Every refusal removes the staged bytes
// and the artifact's row.
func (s *Service) Upload(ctx context.Context, capability string, contentLength int64, body io.Reader) (*protocol.UploadResponse, error) {
	if s.art.Storage == nil {
		return nil, fmt.Errorf("this server stores no artifacts: %w", protocol.ErrUnavailable)
	}
	var art *store.Artifact
	err := s.store.InTx(ctx, func(tx store.Tx) (err error) {
		// The capability is what tells the tenant (lookup by its digest).
		art, err = tx.ArtifactBeginUpload(store.WithSystem(ctx, "artifact upload"), protocol.SHA256Hex([]byte(capability)), s.clock.NowOrNil())
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("the upload capability is unknown, used or expired: %w", protocol.ErrCapabilityExpired)
		}
		return err
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	ctx = store.WithTenant(ctx, art.Tenant)
	limit := art.MaxBytes
	if art.ExpectedSize > 0 {
		limit = art.ExpectedSize
	}
	// refuse forgets the artifact; it runs even when the request's context
	// ended, since the row must not outlive a refused upload.
	refuse := func(cause error) error {
		cleanup := context.WithoutCancel(ctx)
		if err := s.store.InTx(cleanup, func(tx store.Tx) error { return tx.ArtifactDelete(cleanup, art.ID) }); err != nil {
			s.log.WarnContext(ctx, "control: forget refused upload", "artifact_id", art.ID, "err", err)
		}
		return cause
	}
	if contentLength > limit {
		return nil, refuse(fmt.Errorf("artifact %s may have at most %d bytes, Content-Length is %d: %w", art.Name, limit, contentLength, protocol.ErrTooLarge))
	}
	staged, err := s.art.Storage.Stage(ctx, art.StorageKey, body, limit)
	switch {
	case errors.Is(err, artifact.ErrTooLarge):
		return nil, refuse(fmt.Errorf("artifact %s may have at most %d bytes: %w", art.Name, limit, protocol.ErrTooLarge))
	case errors.Is(err, artifact.ErrUnavailable):
		return nil, refuse(fmt.Errorf("stage %s: %s: %w", art.Name, err.Error(), protocol.ErrUnavailable))
	case err != nil:
		return nil, refuse(protocol.Refused(protocol.ErrBadRequest, fmt.Errorf("upload of %s interrupted: %w", art.Name, err)))
	}
	defer staged.Discard()
	if art.ExpectedSize > 0 && staged.Size() != art.ExpectedSize {
		return nil, refuse(fmt.Errorf("artifact %s has %d bytes, %d were announced: %w", art.Name, staged.Size(), art.ExpectedSize, protocol.ErrSizeMismatch))
	}
	if art.ExpectedSHA256 != "" && staged.SHA256() != art.ExpectedSHA256 {
		return nil, refuse(fmt.Errorf("artifact %s has SHA-256 %s, %s was announced: %w", art.Name, staged.SHA256(), art.ExpectedSHA256, protocol.ErrDigestMismatch))
	}
	if err := failpoint.Inject("upload.afterHashBeforePublish"); err != nil {
		return nil, refuse(err)
	}
	if err := staged.Publish(ctx); err != nil {
		if errors.Is(err, artifact.ErrExists) {
			return nil, refuse(fmt.Errorf("artifact %s of attempt %s is already stored: %w", art.Name, art.AttemptID, protocol.ErrAlreadyExists))
		}
		// The outcome is unknown: the store may have published before its
		// answer was lost. The row stays "uploading", so it is never
		// listed, and the sweeper removes it and any object under its key
		// once the upload's time is over (no stored row can own that key:
		// an attempt stores one artifact of a name).
		return nil, fmt.Errorf("%s: %w", err.Error(), protocol.ErrUnavailable)
	}
	if err := failpoint.Inject("upload.afterPublishBeforeCommit"); err != nil {
		return nil, err // as a crash here would: the row stays "uploading", never listed
	}
	art.Size, art.SHA256, art.StoredAt = staged.Size(), staged.SHA256(), s.clock.NowOrNil()
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		if err := s.checkLive(ctx, tx, art.AttemptID, art.LeaseDigest); err != nil {
			return err
		}
		if err := tx.ArtifactMarkStored(ctx, art); err != nil {
			if errors.Is(err, store.ErrAlreadyExists) {
				return fmt.Errorf("artifact %s of attempt %s is already stored: %w", art.Name, art.AttemptID, protocol.ErrAlreadyExists)
			}
			return err
		}
		return s.audit(ctx, tx, art.Tenant, "attempt:"+art.AttemptID, "artifact.stored", art.RunID,
			map[string]any{"attempt": art.AttemptID, "artifact": art.ID, "name": art.Name, "role": art.Role, "size": art.Size, "sha256": art.SHA256})
	})
	if err != nil {
		// Unpublish: the bytes must not stay visible without their row. A
		// lost commit (ErrCommitUnknown) may have stored the row; the
		// client's retry then finds the capability used, and the listing
		// tells which happened.
		if !errors.Is(err, store.ErrCommitUnknown) {
			_ = s.art.Storage.Delete(context.WithoutCancel(ctx), art.StorageKey)
			return nil, refuse(store.Refusal(err))
		}
		return nil, store.Refusal(err)
	}
	return &protocol.UploadResponse{ArtifactID: art.ID, Size: art.Size, SHA256: art.SHA256}, nil
}

// StagedUploadSweepInterval is how often SweepStagedUploads runs.
const StagedUploadSweepInterval = 10 * time.Minute

// stagedUploadBatch bounds one sweep's removals.
const stagedUploadBatch = 100

// SweepStagedUploads drops staged uploads older than the upload timeout
// plus a margin, which only a server killed in the middle of an upload
// leaves (an upload in flight is younger: its body must arrive within the
// timeout). It is safe on every replica at once: with a shared S3 store
// aborting an upload twice is harmless, and a filesystem store is the
// replica's own.
func (s *Service) SweepStagedUploads(ctx context.Context) (int, error) {
	if s.art.Storage == nil {
		return 0, nil
	}
	cutoff := s.clock.Now().Add(-s.UploadTimeout() - 5*time.Minute)
	n, err := s.art.Storage.SweepStaged(ctx, cutoff, stagedUploadBatch)
	if n > 0 {
		s.obs.Swept("staged_upload", n)
		s.log.InfoContext(ctx, "control: swept staged uploads", "count", n)
	}
	if err != nil {
		return n, fmt.Errorf("sweep staged uploads: %w", err)
	}
	return n, nil
}

// checkLive refuses unless the attempt still holds the lease leaseDigest
// names: capabilities and tickets are only as good as the attempt that
// obtained them (RELIABILITY A3, ST2).
func (s *Service) checkLive(ctx context.Context, tx store.Tx, attemptID, leaseDigest string) error {
	a, err := tx.AttemptGetByID(ctx, attemptID, true)
	if err != nil {
		return err
	}
	now, err := tx.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return err
	}
	switch {
	case a.State != store.AttemptLeased:
		return fmt.Errorf("attempt %s is %s: %w", a.ID, a.State, protocol.ErrAttemptStale)
	case !digestEqual(a.LeaseDigest, leaseDigest):
		return fmt.Errorf("attempt %s holds another lease now: %w", a.ID, protocol.ErrAttemptStale)
	case a.LeaseExpiresAt == nil || !now.Before(*a.LeaseExpiresAt):
		return fmt.Errorf("lease of attempt %s expired: %w", a.ID, protocol.ErrLeaseExpired)
	}
	return nil
}

// checkResultArtifacts accepts only stored artifacts of the attempt.
func (s *Service) checkResultArtifacts(ctx context.Context, tx store.Tx, a *store.Attempt, ids []string) error {
	seen := map[string]bool{}
	for _, aid := range ids {
		art, err := tx.ArtifactGetByID(ctx, aid)
		if err == nil {
			noteCrossTenant(ctx, a.Tenant, "artifact", art.Tenant)
		} else if errors.Is(err, store.ErrNotFound) {
			noteCrossTenant(ctx, a.Tenant, "artifact", probeTenant(ctx, tx, "artifact", aid))
		}
		if errors.Is(err, store.ErrNotFound) || (err == nil && (art.AttemptID != a.ID || art.State != store.ArtifactStored)) || seen[aid] {
			return fmt.Errorf("artifact %s is not a verified artifact of attempt %s: %w", aid, a.ID, protocol.ErrArtifactInvalid)
		}
		if err != nil {
			return err
		}
		seen[aid] = true
	}
	return nil
}

// RunArtifacts lists a run's stored artifacts.
func (s *Service) RunArtifacts(ctx context.Context, actor principal.Actor, runID string) ([]protocol.Artifact, error) {
	v, err := s.GetRun(ctx, actor, runID)
	if err != nil {
		return nil, err
	}
	arts, err := s.store.ArtifactListByRun(ctx, runID)
	if err != nil {
		return nil, store.Refusal(err)
	}
	number := map[string]int{}
	for _, a := range v.Attempts {
		number[a.ID] = a.Number
	}
	out := make([]protocol.Artifact, 0, len(arts))
	for _, a := range arts {
		p := protocol.Artifact{ID: a.ID, Name: a.Name, Role: a.Role, Size: a.Size, SHA256: a.SHA256, AttemptID: a.AttemptID, AttemptNumber: number[a.AttemptID]}
		if a.StoredAt != nil {
			p.StoredAt = a.StoredAt.UTC()
		}
		out = append(out, p)
	}
	return out, nil
}

// OpenArtifact opens the bytes of a run's artifact by name: the one of the
// latest attempt that stored it.
func (s *Service) OpenArtifact(ctx context.Context, actor principal.Actor, runID, name string) (*protocol.Artifact, io.ReadCloser, error) {
	if err := artifact.ValidName(name); err != nil {
		return nil, nil, fmt.Errorf("name %q: %w", name, protocol.ErrInvalidName)
	}
	arts, err := s.RunArtifacts(ctx, actor, runID)
	if err != nil {
		return nil, nil, err
	}
	var found *protocol.Artifact
	for i := range arts {
		if arts[i].Name == name && (found == nil || arts[i].AttemptNumber > found.AttemptNumber) {
			found = &arts[i]
		}
	}
	if found == nil || s.art.Storage == nil {
		return nil, nil, fmt.Errorf("run %s has no artifact %q: %w", runID, name, protocol.ErrNotFound)
	}
	stored, err := s.store.ArtifactGetByID(ctx, found.ID)
	if err != nil {
		return nil, nil, store.Refusal(err)
	}
	rc, err := s.art.Storage.Open(ctx, stored.StorageKey)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, nil, fmt.Errorf("artifact %s of run %s is recorded but its bytes are missing: %w", name, runID, protocol.ErrUnavailable)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open artifact %s of run %s: %s: %w", name, runID, err.Error(), protocol.ErrUnavailable)
	}
	return found, rc, nil
}
