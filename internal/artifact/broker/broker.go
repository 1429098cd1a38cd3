package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/failpoint"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Defaults of artifact uploads (docs/artifacts.md).
const (
	DefaultUploadTTL     = 5 * time.Minute
	DefaultUploadTimeout = 15 * time.Minute
)

// Runs is what the artifact service asks of the run service.
type Runs interface {
	// RunnerAttempt locks and returns, in tx, the attempt a signed call
	// names and its run, refusing anything that is not the runner's live
	// lease (an ended attempt included), and the time of the check.
	RunnerAttempt(ctx context.Context, tx store.Tx, call *principal.RunnerCall) (*store.Attempt, *store.Run, time.Time, error)
	// JobAttempt is RunnerAttempt for a job's verified run token; it
	// returns the attempt's runner too.
	JobAttempt(ctx context.Context, tx store.Tx, call *principal.JobCall) (*store.Attempt, *store.Run, time.Time, *store.Runner, error)
	// HoldsLease refuses, in tx, unless the attempt still holds the lease
	// leaseDigest names.
	HoldsLease(ctx context.Context, tx store.Tx, attemptID, leaseDigest string) error
	// RunAttempts returns the attempts of a run the actor may see,
	// refusing as not found a run it may not.
	RunAttempts(ctx context.Context, actor principal.Actor, runID string) ([]*store.Attempt, error)
}

// Config configures the Service.
type Config struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	Runs   Runs
	// Storage keeps the bytes; without it every upload is refused as
	// unavailable.
	Storage artifact.Storage
	// APIURL is the server's address as runners call it; capabilities are
	// URLs under it.
	APIURL string
	// UploadTTL is how long an upload capability may wait for its use.
	UploadTTL time.Duration
	// UploadTimeout bounds the time an upload's body may take to arrive
	// (a trickling client is cut off then).
	UploadTimeout time.Duration
}

// Service is the artifact service.
type Service struct {
	store   store.Store
	clock   clock.Clock
	log     *slog.Logger
	runs    Runs
	storage artifact.Storage
	apiURL  string
	ttl     time.Duration
	timeout time.Duration
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.UploadTTL <= 0 {
		cfg.UploadTTL = DefaultUploadTTL
	}
	if cfg.UploadTimeout <= 0 {
		cfg.UploadTimeout = DefaultUploadTimeout
	}
	return &Service{store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, runs: cfg.Runs, storage: cfg.Storage,
		apiURL: cfg.APIURL, ttl: cfg.UploadTTL, timeout: cfg.UploadTimeout}
}

// UploadTimeout is how long an upload's body may take.
func (s *Service) UploadTimeout() time.Duration { return s.timeout }

func (s *Service) audit(ctx context.Context, tx store.Tx, tenant, actor, action, subject string, details any) error {
	return audit.Recorder{Clock: s.clock}.Append(ctx, tx, tenant, actor, action, subject, details)
}

// declared reads the artifacts the run's pinned spec declares, with the
// default size limit where the job sets none.
func declared(r *store.Run) ([]protocol.ArtifactSpec, error) {
	var spec struct {
		Artifacts []protocol.ArtifactSpec `json:"artifacts"`
	}
	if err := json.Unmarshal(r.Spec, &spec); err != nil {
		return nil, err
	}
	for i := range spec.Artifacts {
		if spec.Artifacts[i].MaxBytes <= 0 {
			spec.Artifacts[i].MaxBytes = artifact.DefaultMaxBytes
		}
	}
	return spec.Artifacts, nil
}

var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// attemptCheck reads and checks, in tx, the live attempt a call names,
// with its run, the store's time and the audit log's actor.
type attemptCheck func(ctx context.Context, tx store.Tx) (*store.Attempt, *store.Run, time.Time, string, error)

// RequestUpload issues a single-use upload capability for an artifact the
// attempt's job declares.
func (s *Service) RequestUpload(ctx context.Context, call *principal.RunnerCall, req *protocol.ArtifactRequest) (*protocol.ArtifactCapability, error) {
	return s.requestUpload(ctx, func(ctx context.Context, tx store.Tx) (*store.Attempt, *store.Run, time.Time, string, error) {
		a, r, now, err := s.runs.RunnerAttempt(ctx, tx, call)
		return a, r, now, "runner:" + call.Runner.ID, err
	}, req)
}

// JobUpload is RequestUpload for a job that presents its run token (the
// Kubernetes executor's pod, which holds no runner key): the same
// capability, bound to the attempt's current lease.
func (s *Service) JobUpload(ctx context.Context, call *principal.JobCall, req *protocol.ArtifactRequest) (*protocol.ArtifactCapability, error) {
	return s.requestUpload(store.WithTenant(ctx, call.Tenant), func(ctx context.Context, tx store.Tx) (*store.Attempt, *store.Run, time.Time, string, error) {
		a, r, now, _, err := s.runs.JobAttempt(ctx, tx, call)
		return a, r, now, "run:" + call.Run, err
	}, req)
}

func (s *Service) requestUpload(ctx context.Context, check attemptCheck, req *protocol.ArtifactRequest) (*protocol.ArtifactCapability, error) {
	if err := artifact.ValidName(req.Name); err != nil {
		return nil, fmt.Errorf("name %s: %w", strings.TrimPrefix(err.Error(), artifact.ErrInvalidName.Error()+": "), protocol.ErrInvalidName)
	}
	// Lowercase hex is the protocol's form; upper case is the same digest,
	// and refusing it would be a false positive.
	want := strings.ToLower(req.SHA256)
	if want != "" && !sha256HexRE.MatchString(want) {
		return nil, fmt.Errorf("sha256 must be 64 hex digits of a SHA-256, without an algorithm label: %w", protocol.ErrBadRequest)
	}
	if req.Size < 0 {
		return nil, fmt.Errorf("size must not be negative: %w", protocol.ErrBadRequest)
	}
	if s.storage == nil {
		return nil, fmt.Errorf("this server stores no artifacts: %w", protocol.ErrUnavailable)
	}
	capability := id.Secret(32)
	var out *protocol.ArtifactCapability
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		a, r, now, actor, err := check(ctx, tx)
		if err != nil {
			return err
		}
		decls, err := declared(r)
		if err != nil {
			return err
		}
		var decl *protocol.ArtifactSpec
		for _, d := range decls {
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
		expires := now.Add(s.ttl)
		if a.Deadline != nil && a.Deadline.Before(expires) {
			expires = *a.Deadline
		}
		art := &store.Artifact{
			ID: id.New("art_", now), Tenant: r.Tenant, RunID: r.ID, AttemptID: a.ID, Name: req.Name, Role: decl.Role,
			MaxBytes: decl.MaxBytes, ExpectedSize: req.Size, ExpectedSHA256: want,
			CapabilityDigest: protocol.SHA256Hex([]byte(capability)), LeaseDigest: a.LeaseDigest,
			StorageKey: key, State: store.ArtifactPending, ExpiresAt: expires, CreatedAt: clock.NowOrZero(s.clock),
		}
		if err := tx.ArtifactCreate(ctx, art); err != nil {
			return err
		}
		out = &protocol.ArtifactCapability{ArtifactID: art.ID, UploadURL: s.apiURL + "/v1/uploads/" + capability,
			MaxBytes: art.MaxBytes, ExpiresAt: expires.UTC()}
		if art.ExpectedSize > 0 {
			out.MaxBytes = art.ExpectedSize
		}
		return s.audit(ctx, tx, r.Tenant, actor, "artifact.capability_issued", r.ID,
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
	if s.storage == nil {
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
			s.log.WarnContext(ctx, "artifacts: forget refused upload", "artifact_id", art.ID, "err", err)
		}
		return cause
	}
	if contentLength > limit {
		return nil, refuse(fmt.Errorf("artifact %s may have at most %d bytes, Content-Length is %d: %w", art.Name, limit, contentLength, protocol.ErrTooLarge))
	}
	staged, err := s.storage.Stage(ctx, art.StorageKey, body, limit)
	switch {
	case errors.Is(err, artifact.ErrTooLarge):
		return nil, refuse(fmt.Errorf("artifact %s may have at most %d bytes: %w", art.Name, limit, protocol.ErrTooLarge))
	case errors.Is(err, artifact.ErrUnavailable):
		return nil, refuse(protocol.Refused(protocol.ErrUnavailable, fmt.Errorf("stage %s: %w", art.Name, err)))
	case errors.Is(err, protocol.ErrRequestTimeout):
		return nil, refuse(fmt.Errorf("upload of %s stalled: %w", art.Name, err))
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
		return nil, protocol.Refused(protocol.ErrUnavailable, err)
	}
	if err := failpoint.Inject("upload.afterPublishBeforeCommit"); err != nil {
		return nil, err // as a crash here would: the row stays "uploading", never listed
	}
	art.Size, art.SHA256, art.StoredAt = staged.Size(), staged.SHA256(), s.clock.NowOrNil()
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		if err := s.runs.HoldsLease(ctx, tx, art.AttemptID, art.LeaseDigest); err != nil {
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
			_ = s.storage.Delete(context.WithoutCancel(ctx), art.StorageKey)
			return nil, refuse(store.Refusal(err))
		}
		return nil, store.Refusal(err)
	}
	return &protocol.UploadResponse{ArtifactID: art.ID, Size: art.Size, SHA256: art.SHA256}, nil
}

// RunArtifacts lists a run's stored artifacts.
func (s *Service) RunArtifacts(ctx context.Context, actor principal.Actor, runID string) ([]protocol.Artifact, error) {
	attempts, err := s.runs.RunAttempts(ctx, actor, runID)
	if err != nil {
		return nil, err
	}
	arts, err := s.store.ArtifactListByRun(ctx, runID)
	if err != nil {
		return nil, store.Refusal(err)
	}
	number := map[string]int{}
	for _, a := range attempts {
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
	gone := fmt.Errorf("run %s has no artifact %q: %w", runID, name, protocol.ErrNotFound)
	if found == nil || s.storage == nil {
		return nil, nil, gone
	}
	if err := failpoint.Inject("artifact.open.afterList"); err != nil {
		return nil, nil, err
	}
	stored, err := s.store.ArtifactGetByID(ctx, found.ID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && stored.State != store.ArtifactStored) {
		return nil, nil, gone
	}
	if err != nil {
		return nil, nil, store.Refusal(err)
	}
	rc, err := s.storage.Open(ctx, stored.StorageKey)
	if errors.Is(err, artifact.ErrNotFound) {
		// A retention sweep may have taken the artifact since it was read:
		// then it is gone, not broken.
		again, gerr := s.store.ArtifactGetByID(ctx, found.ID)
		if errors.Is(gerr, store.ErrNotFound) || (gerr == nil && again.State != store.ArtifactStored) {
			return nil, nil, gone
		}
		return nil, nil, fmt.Errorf("artifact %s of run %s is recorded but its bytes are missing: %w", name, runID, protocol.ErrUnavailable)
	}
	if err != nil {
		return nil, nil, protocol.Refused(protocol.ErrUnavailable, fmt.Errorf("open artifact %s of run %s: %w", name, runID, err))
	}
	return found, rc, nil
}
