package runcreds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/connector/broker"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Config configures the Service.
type Config struct {
	Store store.Store
	Clock clock.Clock
	// Keys signs and verifies run tokens (nil: run tokens are not
	// configured, and every one presented is refused).
	Keys *Keys
	// Box seals secrets with the server key (nil: secrets are refused).
	Box *creds.Box
	// Broker issues and revokes connector credentials (nil: connectors
	// are refused).
	Broker *broker.Broker
	// RevokeBatch bounds one revocation pass (default 100).
	RevokeBatch int
}

// Service verifies the run tokens jobs present, hands jobs their connector
// credentials and revokes them when attempts end, keeps secrets, and
// rotates the signing keys.
type Service struct {
	store  store.Store
	clock  clock.Clock
	keys   *Keys
	box    *creds.Box
	broker *broker.Broker
	batch  int
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.RevokeBatch <= 0 {
		cfg.RevokeBatch = 100
	}
	return &Service{store: cfg.Store, clock: cfg.Clock, keys: cfg.Keys, box: cfg.Box, broker: cfg.Broker, batch: cfg.RevokeBatch}
}

func (s *Service) audit(ctx context.Context, tx store.Tx, tenant, actor, action, subject string, details any) error {
	return audit.Recorder{Clock: s.clock}.Append(ctx, tx, tenant, actor, action, subject, details)
}

var (
	secretNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	channelRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
)

// pinnedConnectors reads the connectors of a run's pinned spec: the
// "connectors" member the run service pinned at request time.
func pinnedConnectors(r *store.Run) (spec struct {
	Connectors map[string]connector.Pinned `json:"connectors"`
}, err error) {
	err = json.Unmarshal(r.Spec, &spec)
	return spec, err
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// RunCaller is a job authenticated by its run token.
type RunCaller struct {
	Claims  *creds.Claims
	Run     *store.Run
	Attempt *store.Attempt
}

// VerifyRunToken checks a run token and that its attempt is still live: a
// token outlives nothing it was minted for, whatever its exp says.
func (s *Service) VerifyRunToken(ctx context.Context, token string) (*RunCaller, error) {
	claims, err := s.verify(token)
	if err != nil {
		return nil, err
	}
	// The verified token tells the tenant.
	ctx = store.WithTenant(ctx, claims.Tenant)
	a, now, err := s.tokenAttempt(ctx, claims)
	if err != nil {
		return nil, err
	}
	if a.State != store.AttemptLeased || a.LeaseExpiresAt == nil || !now.Before(*a.LeaseExpiresAt) {
		return nil, fmt.Errorf("the attempt of this run token has ended: %w", protocol.ErrUnauthorized)
	}
	r, err := s.store.RunGetByID(ctx, a.RunID, false)
	if err != nil {
		return nil, store.Refusal(err)
	}
	return &RunCaller{Claims: claims, Run: r, Attempt: a}, nil
}

var errNoRunTokens = fmt.Errorf("run tokens are not configured: %w", protocol.ErrUnauthorized)

// verify checks a run token's signature and validity, for every endpoint
// a job calls with one.
func (s *Service) verify(token string) (*creds.Claims, error) {
	if s.keys == nil {
		return nil, errNoRunTokens
	}
	claims, err := s.keys.verifier.Verify(token)
	if err != nil {
		return nil, fmt.Errorf("run token: %s: %w", tokenProblem(err), protocol.ErrUnauthorized)
	}
	return claims, nil
}

// tokenAttempt reads the attempt that verified claims name, with ctx in
// their tenant, and the store's time to judge its lease by; the callers
// answer an attempt that no longer holds its lease each their own way.
func (s *Service) tokenAttempt(ctx context.Context, claims *creds.Claims) (*store.Attempt, time.Time, error) {
	a, err := s.store.AttemptGetByID(ctx, claims.AttemptID, false)
	if errors.Is(err, store.ErrNotFound) {
		return nil, time.Time{}, fmt.Errorf("run token names an unknown attempt: %w", protocol.ErrUnauthorized)
	}
	if err != nil {
		return nil, time.Time{}, store.Refusal(err)
	}
	if a.RunID != claims.RunID || a.Tenant != claims.Tenant {
		return nil, time.Time{}, fmt.Errorf("run token does not match its attempt: %w", protocol.ErrUnauthorized)
	}
	now, err := s.store.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return nil, time.Time{}, store.Refusal(err)
	}
	return a, now, nil
}

// tokenProblem names why a token was refused without echoing it.
func tokenProblem(err error) string {
	switch {
	case errors.Is(err, creds.ErrTokenExpired):
		return "expired"
	case errors.Is(err, creds.ErrTokenNotYetValid):
		return "not yet valid"
	case errors.Is(err, creds.ErrTokenUnknownKey):
		return "unknown signing key"
	case errors.Is(err, creds.ErrTokenSignature):
		return "bad signature"
	}
	return "invalid"
}

// RotateSigningKeys rotates the run-token signing key (admin).
func (s *Service) RotateSigningKeys(ctx context.Context, actor principal.Actor) (string, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return "", err
	}
	if s.keys == nil {
		return "", fmt.Errorf("run tokens are not configured: %w", protocol.ErrUnavailable)
	}
	kid, err := s.keys.Rotate(ctx)
	if err != nil {
		return "", store.Refusal(err)
	}
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		return s.audit(ctx, tx, actor.TenantID, actor.Name, "signing_key.rotated", kid, nil)
	})
	return kid, store.Refusal(err)
}

// Keys is the run-token signing key set (JWKS, reload), or nil.
func (s *Service) Keys() *Keys { return s.keys }

// RefuseRunToken records that a run token was presented where only people
// and services may call, and returns the refusal (RELIABILITY T1).
func (s *Service) RefuseRunToken(ctx context.Context, caller *RunCaller, route string) error {
	ctx = store.WithTenant(ctx, caller.Claims.Tenant)
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		return s.audit(ctx, tx, caller.Run.Tenant, "run:"+caller.Run.ID, "run_token.refused", caller.Run.ID,
			map[string]any{"attempt": caller.Attempt.ID, "route": route})
	})
	if err != nil {
		return store.Refusal(err)
	}
	return fmt.Errorf("a run token may only call the /v1/run endpoints, not %s: %w", route, protocol.ErrForbidden)
}

// IssueConnectors hands a running job the credentials of the connectors its
// job declares, each at the level the run was granted: write only when the
// job declares write and both the run's decision and its token grant it,
// read otherwise. The caller has proven, with its run token, that its
// attempt is live.
func (s *Service) IssueConnectors(ctx context.Context, c *RunCaller) (*protocol.RunConnectors, error) {
	out := &protocol.RunConnectors{Env: map[string]string{}, Mask: []string{}}
	spec, err := pinnedConnectors(c.Run)
	if err != nil {
		return nil, err
	}
	if len(spec.Connectors) == 0 {
		return out, nil
	}
	if s.broker == nil {
		return nil, fmt.Errorf("connectors are not configured on this server: %w", protocol.ErrUnavailable)
	}
	var grants map[string]string
	if len(c.Run.Grants) > 0 {
		if err := json.Unmarshal(c.Run.Grants, &grants); err != nil {
			return nil, fmt.Errorf("decode grants of run %s: %w", c.Run.ID, err)
		}
	}
	req := broker.Request{Tenant: c.Run.Tenant, RunID: c.Run.ID, AttemptID: c.Attempt.ID, Channel: c.Run.Channel,
		Connectors: map[string]broker.Use{}}
	if c.Attempt.Deadline != nil {
		req.Deadline = *c.Attempt.Deadline
	}
	levels := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(spec.Connectors)) {
		sc := spec.Connectors[name]
		if sc.Def == nil {
			return nil, fmt.Errorf("connector %s has no definition at commit %s: %w", name, shortCommit(c.Run.Commit), protocol.ErrUnavailable)
		}
		granted := grants[name]
		if string(c.Claims.Grants[name]) != connector.LevelWrite {
			granted = connector.LevelRead // the token never widens the run's grants
		}
		lvl := connector.Level(sc.Declared, granted)
		levels[name] = lvl
		req.Connectors[name] = broker.Use{Def: sc.Def, Level: lvl}
	}
	issued, err := s.broker.Issue(ctx, req)
	if err != nil {
		return nil, protocol.Refused(protocol.ErrUnavailable, fmt.Errorf("issue connectors: %w", err))
	}
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		return s.audit(ctx, tx, c.Run.Tenant, "run:"+c.Run.ID, "connector.issued", c.Run.ID,
			map[string]any{"attempt": c.Attempt.ID, "connectors": levels})
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	out.Env = issued.Env
	out.Mask = issued.Secrets
	return out, nil
}

// RevokeCredentials revokes what was minted for attempts that have ended
// (or whose lease ran out): it runs with the reaper.
func (s *Service) RevokeCredentials(ctx context.Context) (int, error) {
	ctx = store.WithSystem(ctx, "credential revocation") // cross-tenant by nature (docs/operations.md)
	if s.broker == nil {
		return 0, nil
	}
	return s.broker.Revoke(ctx, s.clock.NowOrNil(), s.batch)
}

// MaxSecretBytes bounds one secret value.
const MaxSecretBytes = 64 << 10

// SetSecret stores a secret value, sealed with the server key and bound to
// its tenant, name and channel. The value is never logged, audited or
// returned by any read.
func (s *Service) SetSecret(ctx context.Context, actor principal.Actor, name, channel, value string) error {
	if err := principal.RequireAdmin(actor); err != nil {
		return err
	}
	if !secretNameRE.MatchString(name) {
		return &protocol.FieldError{Field: "name", Err: fmt.Errorf("secret name must match %s: %w", secretNameRE, protocol.ErrBadRequest)}
	}
	if channel != "" && !channelRE.MatchString(channel) {
		return &protocol.FieldError{Field: "channel", Err: fmt.Errorf("channel must match %s: %w", channelRE, protocol.ErrBadRequest)}
	}
	if value == "" || len(value) > MaxSecretBytes {
		return &protocol.FieldError{Field: "value", Err: fmt.Errorf("value must be 1 to %d bytes: %w", MaxSecretBytes, protocol.ErrBadRequest)}
	}
	if s.box == nil {
		return fmt.Errorf("secrets are not configured: %w", protocol.ErrUnavailable)
	}
	sealed := s.box.Seal([]byte(value), creds.SecretAD(actor.TenantID, name, channel))
	return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.SecretPut(ctx, &store.Secret{Tenant: actor.TenantID, Name: name, Channel: channel, Ciphertext: sealed}); err != nil {
			return err
		}
		return s.audit(ctx, tx, actor.TenantID, actor.Name, "secret.set", name, map[string]any{"channel": channel})
	}))
}
