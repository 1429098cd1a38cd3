package control

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Credentials mints and verifies run tokens with signing keys kept, sealed
// with the server key, in the store. Every replica reloads the keys
// periodically, so a key rotated on one is published by all.
type Credentials struct {
	store    store.Store
	box      *creds.Box
	clock    clock.Clock
	maxLife  time.Duration
	issuer   *creds.Issuer
	verifier *creds.Verifier

	mu sync.RWMutex
	ks *creds.KeySet
}

// NewCredentials loads (or creates) the signing keys. issuerURL is the iss
// claim: the server's public URL.
func NewCredentials(ctx context.Context, st store.Store, box *creds.Box, clk clock.Clock, issuerURL string) (*Credentials, error) {
	c := &Credentials{store: st, box: box, clock: clk, maxLife: creds.DefaultMaxLifetime}
	if err := c.Reload(ctx); err != nil {
		return nil, err
	}
	var err error
	c.issuer, err = creds.NewIssuer(creds.IssuerConfig{Issuer: issuerURL, MaxLifetime: c.maxLife, Clock: clk, Keys: c})
	if err != nil {
		return nil, err
	}
	c.verifier, err = creds.NewVerifier(creds.VerifierConfig{Issuer: issuerURL, MaxLifetime: c.maxLife, Clock: clk, Keys: c})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// SigningKey implements creds.SigningKeys over the current key set.
func (c *Credentials) SigningKey() (string, ed25519.PrivateKey, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ks.SigningKey()
}

// PublicKey implements creds.PublicKeys over the current key set.
func (c *Credentials) PublicKey(kid string) (ed25519.PublicKey, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ks.PublicKey(kid)
}

// Reload reads the keys from the store again and drops those no token can
// still need.
func (c *Credentials) Reload(ctx context.Context) error {
	ks, err := creds.LoadKeySet(ctx, keyStore{c.store}, c.box, c.maxLife, c.clock.Now())
	if err != nil {
		return fmt.Errorf("load signing keys: %w", err)
	}
	if _, err := ks.PruneAndSave(ctx, keyStore{c.store}, c.clock.Now()); err != nil {
		return fmt.Errorf("prune signing keys: %w", err)
	}
	c.mu.Lock()
	c.ks = ks
	c.mu.Unlock()
	return nil
}

// Rotate makes a new signing key; the old one stays published until every
// token it signed has expired.
func (c *Credentials) Rotate(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, err := c.ks.RotateAndSave(ctx, keyStore{c.store}, c.box, c.clock.Now())
	if err != nil {
		return "", err
	}
	return rec.KID, nil
}

// JWKS is the published key set.
func (c *Credentials) JWKS() ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ks.JWKS()
}

// Mint signs the run token of an attempt; it expires no later than the
// attempt's deadline.
func (c *Credentials) Mint(r *store.Run, a *store.Attempt, grants map[string]string) (*protocol.RunToken, error) {
	g := map[string]creds.Access{}
	for k, v := range grants {
		g[k] = creds.Access(v)
	}
	var deadline time.Time
	if a.Deadline != nil {
		deadline = *a.Deadline
	}
	tok, claims, err := c.issuer.Mint(creds.RunIdentity{
		RunID: r.ID, AttemptID: a.ID, Job: r.Job, Channel: r.Channel, Tenant: r.Tenant, Grants: g, Deadline: deadline,
	})
	if err != nil {
		return nil, fmt.Errorf("mint run token: %w", err)
	}
	return &protocol.RunToken{Token: tok, ExpiresAt: claims.Expiry.UTC()}, nil
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
	if s.creds == nil {
		return nil, fmt.Errorf("run tokens are not configured: %w", protocol.ErrUnauthorized)
	}
	claims, err := s.creds.verifier.Verify(token)
	if err != nil {
		return nil, fmt.Errorf("run token: %s: %w", tokenProblem(err), protocol.ErrUnauthorized)
	}
	// The verified token tells the tenant.
	ctx = store.WithTenant(ctx, claims.Tenant)
	a, err := s.store.AttemptGetByID(ctx, claims.AttemptID, false)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("run token names an unknown attempt: %w", protocol.ErrUnauthorized)
	}
	if err != nil {
		return nil, store.Refusal(err)
	}
	now, err := s.store.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return nil, store.Refusal(err)
	}
	if a.RunID != claims.RunID || a.Tenant != claims.Tenant {
		return nil, fmt.Errorf("run token does not match its attempt: %w", protocol.ErrUnauthorized)
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
	if s.creds == nil {
		return "", fmt.Errorf("run tokens are not configured: %w", protocol.ErrUnavailable)
	}
	kid, err := s.creds.Rotate(ctx)
	if err != nil {
		return "", store.Refusal(err)
	}
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		return s.audit(ctx, tx, actor.TenantID, actor.Name, "signing_key.rotated", kid, nil)
	})
	return kid, store.Refusal(err)
}

// Tokens exposes the run-token credentials (JWKS, reload), or nil.
func (s *Service) Tokens() *Credentials { return s.creds }

// keyStore backs creds.KeyStore with the store.
type keyStore struct{ st store.Store }

func (k keyStore) ListKeys(ctx context.Context) ([]creds.SealedKey, error) {
	ks, err := k.st.SigningKeyList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]creds.SealedKey, 0, len(ks))
	for _, x := range ks {
		out = append(out, creds.SealedKey{KID: x.KID, Sealed: x.Sealed})
	}
	return out, nil
}

// PutKey replaces the stored key of the same kid (its sealed form carries
// the retirement time).
func (k keyStore) PutKey(ctx context.Context, sk creds.SealedKey) error {
	return k.st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.SigningKeyDelete(ctx, sk.KID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return tx.SigningKeyCreate(ctx, &store.SigningKey{KID: sk.KID, Sealed: sk.Sealed})
	})
}

func (k keyStore) DeleteKey(ctx context.Context, kid string) error {
	err := k.st.SigningKeyDelete(ctx, kid)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

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
