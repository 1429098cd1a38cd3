package admin

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

var (
	nameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	labelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$`)
)

// Service administers a tenant's principals, API tokens and runners.
type Service struct {
	store store.Store
	clock clock.Clock
	// onRunners is OnRunnersChanged's.
	onRunners func()
}

// New returns a Service over the store; a nil clock is the real one.
func New(st store.Store, clk clock.Clock) *Service {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Service{store: st, clock: clk}
}

// EnsureAdmin creates the admin principal of the default tenant with this
// bearer token (JOBPLANE_ADMIN_TOKEN), once.
func (s *Service) EnsureAdmin(ctx context.Context, token string) error {
	ctx = store.WithSystem(ctx, "startup") // cross-tenant by nature (docs/operations.md)
	if len(token) < 16 {
		return errors.New("JOBPLANE_ADMIN_TOKEN must be at least 16 characters")
	}
	return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
		t, err := tx.TenantEnsure(ctx, principal.DefaultTenant, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		p, err := tx.PrincipalGetByName(ctx, t.ID, "admin")
		if errors.Is(err, store.ErrNotFound) {
			p = &store.Principal{ID: id.New(id.Principal, now), Tenant: t.ID, Kind: "user", Name: "admin", Admin: true, CreatedAt: now}
			if err := tx.PrincipalCreate(ctx, p); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		_, _, err = tx.APITokenGetByDigest(ctx, authn.Digest(token))
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := tx.APITokenCreate(ctx, &store.APIToken{ID: id.New(id.Token, now), PrincipalID: p.ID, Digest: authn.Digest(token), CreatedAt: now}); err != nil {
			return err
		}
		return audit.Recorder{Clock: s.clock}.Append(ctx, tx, t.ID, "system", "token.created", p.Name, map[string]any{"source": "JOBPLANE_ADMIN_TOKEN"})
	}))
}

// CreateRegistrationToken makes a single-use runner registration token.
func (s *Service) CreateRegistrationToken(ctx context.Context, actor principal.Actor, req *protocol.RegistrationTokenRequest) (*protocol.TokenResponse, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	if req.Pool == "" {
		req.Pool = "default"
	}
	if !nameRE.MatchString(req.Pool) {
		return nil, &protocol.FieldError{Field: "pool", Err: fmt.Errorf("pool must match %s: %w", nameRE, protocol.ErrBadRequest)}
	}
	for _, l := range req.Labels {
		if !labelRE.MatchString(l) {
			return nil, &protocol.FieldError{Field: "labels", Err: fmt.Errorf("label %q must match %s: %w", l, labelRE, protocol.ErrBadRequest)}
		}
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	switch {
	case req.TTLSeconds == 0:
		ttl = time.Hour
	case req.TTLSeconds < 0 || ttl > 30*24*time.Hour:
		return nil, &protocol.FieldError{Field: "ttl_seconds", Err: fmt.Errorf("ttl_seconds must be 1..2592000: %w", protocol.ErrBadRequest)}
	}
	secret := "jpr_" + id.Secret(24)
	var resp *protocol.TokenResponse
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		exp := now.Add(ttl)
		if err := tx.RegTokenCreate(ctx, &store.RegToken{
			Digest: authn.Digest(secret), Tenant: actor.TenantID, Pool: req.Pool, Labels: protocol.NormLabels(req.Labels),
			AllowedRepos: req.AllowedRepos, SelfHosted: req.SelfHosted, ExpiresAt: exp, CreatedAt: now,
		}); err != nil {
			return err
		}
		resp = &protocol.TokenResponse{Token: secret, ExpiresAt: new(exp.UTC())}
		return audit.Recorder{Clock: s.clock}.Append(ctx, tx, actor.TenantID, actor.Name, "registration_token.created", req.Pool, map[string]any{"pool": req.Pool, "labels": req.Labels, "self_hosted": req.SelfHosted, "expires_at": exp.UTC()})
	})
	return resp, store.Refusal(err)
}

// RunnerView is a runner with its leased attempts.
type RunnerView struct {
	Runner   *store.Runner
	Attempts []string
}

// ListRunners lists the tenant's runners.
func (s *Service) ListRunners(ctx context.Context, actor principal.Actor) ([]RunnerView, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	rs, err := s.store.RunnerList(ctx, actor.TenantID)
	if err != nil {
		return nil, store.Refusal(err)
	}
	out := make([]RunnerView, 0, len(rs))
	for _, r := range rs {
		atts, err := s.store.AttemptListLeasedByRunner(ctx, r.ID)
		if err != nil {
			return nil, store.Refusal(err)
		}
		ids := []string{}
		for _, a := range atts {
			ids = append(ids, a.ID)
		}
		out = append(out, RunnerView{Runner: r, Attempts: ids})
	}
	return out, nil
}

// CreatePrincipal adds a user or service principal to the admin's tenant.
// Its groups come from groups.yaml in Git, by name.
func (s *Service) CreatePrincipal(ctx context.Context, actor principal.Actor, req *protocol.PrincipalRequest) (*store.Principal, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	if !nameRE.MatchString(req.Name) {
		return nil, &protocol.FieldError{Field: "name", Err: fmt.Errorf("name must match %s: %w", nameRE, protocol.ErrBadRequest)}
	}
	switch req.Kind {
	case "":
		req.Kind = "user"
	case "user", "service":
	default:
		return nil, &protocol.FieldError{Field: "kind", Err: fmt.Errorf("kind must be user or service: %w", protocol.ErrBadRequest)}
	}
	if req.Name == "scheduler" || req.Name == "github" || req.Name == "system" {
		return nil, &protocol.FieldError{Field: "name", Err: fmt.Errorf("%q is a built-in service principal: %w", req.Name, protocol.ErrBadRequest)}
	}
	var p *store.Principal
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		p = &store.Principal{ID: id.New(id.Principal, now), Tenant: actor.TenantID, Kind: req.Kind, Name: req.Name, CreatedAt: now}
		if err := tx.PrincipalCreate(ctx, p); err != nil {
			if errors.Is(err, store.ErrAlreadyExists) {
				return fmt.Errorf("principal %s exists: %w", req.Name, protocol.ErrAlreadyExists)
			}
			return err
		}
		return audit.Recorder{Clock: s.clock}.Append(ctx, tx, actor.TenantID, actor.Name, "principal.created", p.Name, map[string]any{"kind": p.Kind})
	})
	return p, store.Refusal(err)
}

// CreateToken issues an API token for a principal; the secret is shown once.
func (s *Service) CreateToken(ctx context.Context, actor principal.Actor, name string, ttlSeconds int) (*protocol.TokenResponse, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	if ttlSeconds < 0 || ttlSeconds > 366*24*3600 {
		return nil, &protocol.FieldError{Field: "ttl_seconds", Err: fmt.Errorf("ttl_seconds must be 0 (no expiry) .. 31622400: %w", protocol.ErrBadRequest)}
	}
	secret := "jpt_" + id.Secret(24)
	var resp *protocol.TokenResponse
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		p, err := tx.PrincipalGetByName(ctx, actor.TenantID, name)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("principal %s: %w", name, protocol.ErrNotFound)
		}
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		t := &store.APIToken{ID: id.New(id.Token, now), PrincipalID: p.ID, Digest: authn.Digest(secret), CreatedAt: now}
		if ttlSeconds > 0 {
			t.ExpiresAt = new(now.Add(time.Duration(ttlSeconds) * time.Second))
		}
		if err := tx.APITokenCreate(ctx, t); err != nil {
			return err
		}
		resp = &protocol.TokenResponse{ID: t.ID, Token: secret}
		if t.ExpiresAt != nil {
			resp.ExpiresAt = new(t.ExpiresAt.UTC())
		}
		return audit.Recorder{Clock: s.clock}.Append(ctx, tx, actor.TenantID, actor.Name, "token.created", p.Name, map[string]any{"token_id": t.ID, "expires_at": resp.ExpiresAt})
	})
	return resp, store.Refusal(err)
}

// RevokeToken revokes an API token.
func (s *Service) RevokeToken(ctx context.Context, actor principal.Actor, tokenID string) error {
	if err := principal.RequireAdmin(actor); err != nil {
		return err
	}
	return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.APITokenRevoke(ctx, actor.TenantID, tokenID, s.clock.NowOrNil()); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("token %s: %w", tokenID, protocol.ErrNotFound)
			}
			return err
		}
		return audit.Recorder{Clock: s.clock}.Append(ctx, tx, actor.TenantID, actor.Name, "token.revoked", tokenID, nil)
	}))
}
