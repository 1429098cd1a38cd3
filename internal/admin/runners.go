package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// OnRunnersChanged has f called after every change of a runner this
// service commits (a registration, a key rotation): the run service
// forgets the runner lists it explains queued runs with
// (control.Service.RunnersChanged).
func (s *Service) OnRunnersChanged(f func()) { s.onRunners = f }

func (s *Service) runnersChanged() {
	if s.onRunners != nil {
		s.onRunners()
	}
}

// Register turns a registration token into a runner identity: the
// runner's tenant, pool, labels and repositories are the token's.
func (s *Service) Register(ctx context.Context, regToken string, req *protocol.RegisterRequest) (*store.Runner, error) {
	if _, err := protocol.DecodePublicKey(req.PublicKey); err != nil {
		return nil, protocol.Refused(protocol.ErrBadRequest, fmt.Errorf("public_key: %w", err))
	}
	if len(req.Name) > 200 || len(req.Version) > 100 || len(req.Labels) > 64 {
		return nil, fmt.Errorf("name, version or labels too long: %w", protocol.ErrBadRequest)
	}
	executor, caps, err := store.RunnerCapabilities(req.Executor, req.Capabilities)
	if err != nil {
		return nil, err
	}
	name := req.Name
	if name == "" {
		name = "runner"
	}
	var runner *store.Runner
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		// The token is what tells the tenant: only its lookup is cross-tenant.
		tok, err := tx.RegTokenUse(store.WithSystem(ctx, "runner registration"), principal.Digest(regToken), s.clock.NowOrNil())
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("registration token unknown, used or expired: %w", protocol.ErrRegistrationTokenInvalid)
		}
		if err != nil {
			return err
		}
		ctx := store.WithTenant(ctx, tok.Tenant)
		labels := req.Labels
		if len(tok.Labels) > 0 {
			for _, l := range req.Labels {
				if !slices.Contains(tok.Labels, l) {
					return fmt.Errorf("label %q is not allowed by the registration token (allowed: %v): %w", l, tok.Labels, protocol.ErrBadRequest)
				}
			}
			labels = tok.Labels
		}
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		pub, _ := protocol.DecodePublicKey(req.PublicKey)
		runner = &store.Runner{
			ID: id.New(id.Runner, now), Tenant: tok.Tenant, Pool: tok.Pool, Name: name,
			Labels: protocol.NormLabels(labels), PublicKey: req.PublicKey, KeyFingerprint: protocol.SHA256Hex(pub)[:16],
			Status: store.RunnerActive, SelfHosted: tok.SelfHosted, AllowedRepos: tok.AllowedRepos,
			Version: req.Version, LastSeenAt: &now, CreatedAt: now, Executor: executor, Capabilities: caps,
		}
		if err := tx.RunnerCreate(ctx, runner); err != nil {
			return err
		}
		return audit.Recorder{Clock: s.clock}.Append(ctx, tx, runner.Tenant, "runner:"+runner.ID, "runner.registered", runner.ID, map[string]any{"name": name, "pool": runner.Pool, "labels": runner.Labels, "key_fingerprint": runner.KeyFingerprint,
			"executor": executor, "capabilities": caps.Protocol()})
	})
	s.runnersChanged()
	if err != nil {
		return nil, store.Refusal(err)
	}
	return runner, nil
}

// RotateKey replaces the runner's public key; the old key stops working at once.
func (s *Service) RotateKey(ctx context.Context, call *principal.RunnerCall, req *protocol.RotateKeyRequest) error {
	pub, err := protocol.DecodePublicKey(req.PublicKey)
	if err != nil {
		return protocol.Refused(protocol.ErrBadRequest, fmt.Errorf("public_key: %w", err))
	}
	defer s.runnersChanged()
	return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
		rn, err := tx.RunnerGetByID(ctx, call.Runner.ID, true)
		if err != nil {
			return err
		}
		if rn.PublicKey != call.Runner.PublicKey {
			return fmt.Errorf("the signing key was rotated concurrently: %w", protocol.ErrSignatureInvalid)
		}
		old := rn.KeyFingerprint
		rn.PublicKey = req.PublicKey
		rn.KeyFingerprint = protocol.SHA256Hex(pub)[:16]
		if err := tx.RunnerUpdate(ctx, rn); err != nil {
			return err
		}
		return audit.Recorder{Clock: s.clock}.Append(ctx, tx, rn.Tenant, "runner:"+rn.ID, "runner.key_rotated", rn.ID, map[string]any{"old_fingerprint": old, "new_fingerprint": rn.KeyFingerprint})
	}))
}
