package creds

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// KeyRecord is one run-token signing key.
type KeyRecord struct {
	// KID is the RFC 7638 SHA-256 thumbprint of the public key, base64url:
	// unique, and recomputable by anyone holding the JWKS.
	KID       string
	Private   ed25519.PrivateKey
	CreatedAt time.Time
	// RetiredAt is zero while the key is active (may sign).
	RetiredAt time.Time
}

// Public returns the public half.
func (r KeyRecord) Public() ed25519.PublicKey { return r.Private.Public().(ed25519.PublicKey) }

// Active reports whether the key may sign.
func (r KeyRecord) Active() bool { return r.RetiredAt.IsZero() }

// GenerateKey makes a new active key created at now.
func GenerateKey(now time.Time) (KeyRecord, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return KeyRecord{}, err
	}
	kid, err := thumbprint(priv.Public().(ed25519.PublicKey))
	if err != nil {
		return KeyRecord{}, err
	}
	return KeyRecord{KID: kid, Private: priv, CreatedAt: now.UTC()}, nil
}

func thumbprint(pub ed25519.PublicKey) (string, error) {
	jwk := jose.JSONWebKey{Key: pub}
	tp, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// KeySet holds the signing keys: the newest active key signs; retired keys
// only verify, and stay published until every token they signed has expired.
// It is safe for concurrent use.
type KeySet struct {
	maxLifetime time.Duration
	mu          sync.RWMutex
	keys        []KeyRecord // ordered by CreatedAt, then KID
}

// NewKeySet returns an empty set for tokens of at most maxLifetime (which
// decides how long a retired key stays published).
func NewKeySet(maxLifetime time.Duration) *KeySet {
	if maxLifetime <= 0 {
		maxLifetime = DefaultMaxLifetime
	}
	return &KeySet{maxLifetime: maxLifetime}
}

// Add inserts a key (e.g. one loaded from storage). The key must be a full
// Ed25519 private key whose KID is its thumbprint.
func (ks *KeySet) Add(rec KeyRecord) error {
	if len(rec.Private) != ed25519.PrivateKeySize {
		return errors.New("creds: signing key is not an Ed25519 private key")
	}
	kid, err := thumbprint(rec.Public())
	if err != nil {
		return err
	}
	if kid != rec.KID {
		return errors.New("creds: kid does not match the key's thumbprint")
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, k := range ks.keys {
		if k.KID == rec.KID {
			return fmt.Errorf("creds: duplicate kid %s", rec.KID)
		}
	}
	ks.keys = append(ks.keys, rec)
	ks.sortLocked()
	return nil
}

func (ks *KeySet) sortLocked() {
	slices.SortFunc(ks.keys, func(a, b KeyRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.KID, b.KID)
	})
}

// Rotate adds a new key that signs from now on and retires every previously
// active key (for signing only: they remain published and verify until
// Prune drops them). It returns the new key and the keys it retired, so the
// caller can persist both.
func (ks *KeySet) Rotate(now time.Time) (KeyRecord, []KeyRecord, error) {
	rec, err := GenerateKey(now)
	if err != nil {
		return KeyRecord{}, nil, err
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	var retired []KeyRecord
	for i := range ks.keys {
		if ks.keys[i].Active() {
			ks.keys[i].RetiredAt = now.UTC()
			retired = append(retired, ks.keys[i])
		}
	}
	ks.keys = append(ks.keys, rec)
	ks.sortLocked()
	return rec, retired, nil
}

// publishedUntil is when a retired key can go: its last token expires at
// most maxLifetime after retirement, and verifiers accept it up to MaxLeeway
// after that.
func (ks *KeySet) publishedUntil(r KeyRecord) time.Time {
	return r.RetiredAt.Add(ks.maxLifetime + MaxLeeway)
}

// Prune drops retired keys whose every token has expired and returns their
// kids. Active keys are never pruned.
func (ks *KeySet) Prune(now time.Time) []string {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	var dropped []string
	ks.keys = slices.DeleteFunc(ks.keys, func(r KeyRecord) bool {
		if !r.Active() && now.After(ks.publishedUntil(r)) {
			dropped = append(dropped, r.KID)
			return true
		}
		return false
	})
	return dropped
}

// SigningKey returns the newest active key. It implements SigningKeys.
func (ks *KeySet) SigningKey() (string, ed25519.PrivateKey, error) {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	for i := len(ks.keys) - 1; i >= 0; i-- {
		if ks.keys[i].Active() {
			return ks.keys[i].KID, ks.keys[i].Private, nil
		}
	}
	return "", nil, ErrNoSigningKey
}

// PublicKey returns the published key with this kid (active or retired but
// not pruned). It implements PublicKeys.
func (ks *KeySet) PublicKey(kid string) (ed25519.PublicKey, bool) {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	for _, k := range ks.keys {
		if k.KID == kid {
			return k.Public(), true
		}
	}
	return nil, false
}

// Records returns a copy of the keys, oldest first.
func (ks *KeySet) Records() []KeyRecord {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	return slices.Clone(ks.keys)
}

// JWKS returns the JSON Web Key Set of every published key (OKP/Ed25519,
// use "sig", alg "EdDSA"), newest first, for /.well-known/jwks.json.
func (ks *KeySet) JWKS() ([]byte, error) {
	ks.mu.RLock()
	set := jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, 0, len(ks.keys))}
	for i := len(ks.keys) - 1; i >= 0; i-- {
		k := ks.keys[i]
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Public(), KeyID: k.KID, Algorithm: string(jose.EdDSA), Use: "sig"})
	}
	ks.mu.RUnlock()
	return json.Marshal(set)
}

// DiscoveryDocument returns the OpenID Provider metadata for
// /.well-known/openid-configuration. jobplane is not an OpenID provider;
// the document exists so that federation consumers (Vault's JWT auth, cloud
// IAM) can find the JWKS and the signing algorithm from the issuer URL alone.
func DiscoveryDocument(issuer string) ([]byte, error) {
	if issuer == "" {
		return nil, errors.New("creds: issuer URL required")
	}
	doc := struct {
		Issuer          string   `json:"issuer"`
		JWKSURI         string   `json:"jwks_uri"`
		SigningAlgs     []string `json:"id_token_signing_alg_values_supported"`
		ResponseTypes   []string `json:"response_types_supported"`
		SubjectTypes    []string `json:"subject_types_supported"`
		ClaimsSupported []string `json:"claims_supported"`
	}{
		Issuer:        issuer,
		JWKSURI:       strings.TrimRight(issuer, "/") + "/.well-known/jwks.json",
		SigningAlgs:   []string{string(jose.EdDSA)},
		ResponseTypes: []string{"id_token"},
		SubjectTypes:  []string{"public"},
		ClaimsSupported: []string{"iss", "aud", "sub", "iat", "nbf", "exp", "jti",
			"run_id", "attempt_id", "job", "channel", "tenant", "grants"},
	}
	return json.Marshal(doc)
}

// keyJSON is the sealed plaintext of a key record. Only the 32-byte seed is
// stored; the rest of the private key is derived from it.
type keyJSON struct {
	KID       string     `json:"kid"`
	Seed      []byte     `json:"seed"`
	CreatedAt time.Time  `json:"created_at"`
	RetiredAt *time.Time `json:"retired_at,omitempty"`
}

// MarshalKey seals a key record for storage under the server key, bound to
// its kid (a sealed key stored under another kid does not open).
func MarshalKey(box *Box, rec KeyRecord) ([]byte, error) {
	if len(rec.Private) != ed25519.PrivateKeySize || rec.KID == "" {
		return nil, errors.New("creds: invalid key record")
	}
	kj := keyJSON{KID: rec.KID, Seed: rec.Private.Seed(), CreatedAt: rec.CreatedAt.UTC()}
	if !rec.RetiredAt.IsZero() {
		t := rec.RetiredAt.UTC()
		kj.RetiredAt = &t
	}
	pt, err := json.Marshal(kj)
	clear(kj.Seed)
	if err != nil {
		return nil, err
	}
	defer clear(pt)
	return box.Seal(pt, keyAD(rec.KID)), nil
}

// UnmarshalKey opens a sealed key record stored under kid.
func UnmarshalKey(box *Box, kid string, sealed []byte) (KeyRecord, error) {
	pt, err := box.Open(sealed, keyAD(kid))
	if err != nil {
		return KeyRecord{}, err
	}
	defer clear(pt)
	var kj keyJSON
	if err := json.Unmarshal(pt, &kj); err != nil {
		return KeyRecord{}, fmt.Errorf("creds: sealed key %s: %w", kid, err)
	}
	defer clear(kj.Seed)
	if kj.KID != kid || len(kj.Seed) != ed25519.SeedSize {
		return KeyRecord{}, fmt.Errorf("creds: sealed key %s is inconsistent", kid)
	}
	rec := KeyRecord{KID: kid, Private: ed25519.NewKeyFromSeed(kj.Seed), CreatedAt: kj.CreatedAt}
	if kj.RetiredAt != nil {
		rec.RetiredAt = *kj.RetiredAt
	}
	if tp, err := thumbprint(rec.Public()); err != nil || tp != kid {
		return KeyRecord{}, fmt.Errorf("creds: sealed key %s does not match its kid", kid)
	}
	return rec, nil
}

// SealedKey is a key record as stored: its kid and MarshalKey's output.
type SealedKey struct {
	KID    string
	Sealed []byte
}

// KeyStore persists sealed signing keys. The lead backs it with the store;
// PutKey is an upsert by kid.
type KeyStore interface {
	ListKeys(ctx context.Context) ([]SealedKey, error)
	PutKey(ctx context.Context, k SealedKey) error
	DeleteKey(ctx context.Context, kid string) error
}

// LoadKeySet reads every stored key into a new KeySet; if none is active it
// generates one, stores it and adds it. Call it at start-up and periodically
// on every node, so keys rotated by one node are published by all. Rotation
// itself should run on one node at a time (e.g. under a lease): two
// concurrent rotations leave two active keys, which is harmless (the newer
// signs) but wasteful.
func LoadKeySet(ctx context.Context, st KeyStore, box *Box, maxLifetime time.Duration, now time.Time) (*KeySet, error) {
	stored, err := st.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	ks := NewKeySet(maxLifetime)
	for _, s := range stored {
		rec, err := UnmarshalKey(box, s.KID, s.Sealed)
		if err != nil {
			return nil, fmt.Errorf("creds: signing key %s: %w", s.KID, err)
		}
		if err := ks.Add(rec); err != nil {
			return nil, err
		}
	}
	if _, _, err := ks.SigningKey(); errors.Is(err, ErrNoSigningKey) {
		rec, err := GenerateKey(now)
		if err != nil {
			return nil, err
		}
		if err := saveKey(ctx, st, box, rec); err != nil {
			return nil, err
		}
		if err := ks.Add(rec); err != nil {
			return nil, err
		}
	}
	return ks, nil
}

// RotateAndSave rotates and persists the new key (first, so a crash never
// leaves no active key stored) and then the retired ones.
func (ks *KeySet) RotateAndSave(ctx context.Context, st KeyStore, box *Box, now time.Time) (KeyRecord, error) {
	rec, retired, err := ks.Rotate(now)
	if err != nil {
		return KeyRecord{}, err
	}
	for _, r := range append([]KeyRecord{rec}, retired...) {
		if err := saveKey(ctx, st, box, r); err != nil {
			return KeyRecord{}, err
		}
	}
	return rec, nil
}

// PruneAndSave prunes and deletes the dropped keys from the store.
func (ks *KeySet) PruneAndSave(ctx context.Context, st KeyStore, now time.Time) ([]string, error) {
	dropped := ks.Prune(now)
	for _, kid := range dropped {
		if err := st.DeleteKey(ctx, kid); err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}

func saveKey(ctx context.Context, st KeyStore, box *Box, rec KeyRecord) error {
	sealed, err := MarshalKey(box, rec)
	if err != nil {
		return err
	}
	return st.PutKey(ctx, SealedKey{KID: rec.KID, Sealed: sealed})
}
