package runcreds

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Keys mints and verifies run tokens with signing keys kept, sealed
// with the server key, in the store. Every replica reloads the keys
// periodically, so a key rotated on one is published by all.
type Keys struct {
	store    store.Store
	box      *creds.Box
	clock    clock.Clock
	maxLife  time.Duration
	issuer   *creds.Issuer
	verifier *creds.Verifier

	mu sync.RWMutex
	ks *creds.KeySet
}

// NewKeys loads (or creates) the signing keys. issuerURL is the iss
// claim: the server's public URL.
func NewKeys(ctx context.Context, st store.Store, box *creds.Box, clk clock.Clock, issuerURL string) (*Keys, error) {
	c := &Keys{store: st, box: box, clock: clk, maxLife: creds.DefaultMaxLifetime}
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
func (c *Keys) SigningKey() (string, ed25519.PrivateKey, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ks.SigningKey()
}

// PublicKey implements creds.PublicKeys over the current key set.
func (c *Keys) PublicKey(kid string) (ed25519.PublicKey, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ks.PublicKey(kid)
}

// Reload reads the keys from the store again and drops those no token can
// still need.
func (c *Keys) Reload(ctx context.Context) error {
	ks, err := creds.LoadKeySet(ctx, keyStore{c.store}, c.box, c.maxLife, c.clock.Now())
	if errors.Is(err, creds.ErrSealedInvalid) {
		// The usual cause: a second replica on the same database with its
		// own data directory, which made itself a server key of its own.
		return fmt.Errorf("load signing keys: the signing keys in the database were sealed with another server key: "+
			"every server of one database must use the same key: set %s on each to the key of the first "+
			"(the contents of its DATA-DIR/%s), see docs/operations.md: %w", creds.EnvServerKey, creds.ServerKeyFile, err)
	}
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
func (c *Keys) Rotate(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, err := c.ks.RotateAndSave(ctx, keyStore{c.store}, c.box, c.clock.Now())
	if err != nil {
		return "", err
	}
	return rec.KID, nil
}

// JWKS is the published key set.
func (c *Keys) JWKS() ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ks.JWKS()
}

// Mint signs the run token of an attempt; it expires no later than the
// attempt's deadline.
func (c *Keys) Mint(r *store.Run, a *store.Attempt, grants map[string]string) (*protocol.RunToken, error) {
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
