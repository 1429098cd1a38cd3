package creds

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRotationAndPrune(t *testing.T) {
	f := newFixture(t)
	oldKid, _ := f.signingKey(t)
	oldTok, _ := f.mint(t)

	f.clk.Advance(time.Minute)
	newRec, retired, err := f.ks.Rotate(f.clk.Now())
	require.NoError(t, err)
	require.Len(t, retired, 1)
	require.Equal(t, oldKid, retired[0].KID)
	require.Equal(t, f.clk.Now(), retired[0].RetiredAt)

	kid, _ := f.signingKey(t)
	require.Equal(t, newRec.KID, kid, "the new key signs")
	newTok, _ := f.mint(t)
	require.Contains(t, headerKid(t, newTok), newRec.KID)

	// Retired but published: old tokens still verify, and it is in the JWKS.
	_, err = f.ver.Verify(oldTok)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{oldKid, newRec.KID}, jwksKids(t, f.ks))

	// Not prunable until retired_at + max lifetime + leeway.
	retiredAt := retired[0].RetiredAt
	require.Empty(t, f.ks.Prune(retiredAt.Add(time.Hour+MaxLeeway)))
	_, ok := f.ks.PublicKey(oldKid)
	require.True(t, ok)

	dropped := f.ks.Prune(retiredAt.Add(time.Hour + MaxLeeway + time.Second))
	require.Equal(t, []string{oldKid}, dropped)
	require.Equal(t, []string{newRec.KID}, jwksKids(t, f.ks))

	// A token of the pruned key now fails on the key, before anything else.
	f.clk.Set(t0.Add(time.Minute)) // even at a time when it would not have expired
	_, err = f.ver.Verify(oldTok)
	require.ErrorIs(t, err, ErrTokenUnknownKey)
	_, err = f.ver.Verify(newTok)
	require.NoError(t, err)

	// The active key is never pruned.
	require.Empty(t, f.ks.Prune(t0.Add(1000*time.Hour)))
}

func TestSigningKeyEmpty(t *testing.T) {
	ks := NewKeySet(time.Hour)
	_, _, err := ks.SigningKey()
	require.ErrorIs(t, err, ErrNoSigningKey)

	rec, err := GenerateKey(t0)
	require.NoError(t, err)
	bad := rec
	bad.KID = "not-the-thumbprint"
	require.Error(t, ks.Add(bad))
	require.NoError(t, ks.Add(rec))
	require.Error(t, ks.Add(rec), "duplicate kid")
}

func headerKid(t *testing.T, tok string) string {
	var h struct{ Kid string }
	head, _, _ := strings.Cut(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(head)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &h))
	return h.Kid
}

func jwksKids(t *testing.T, ks *KeySet) []string {
	raw, err := ks.JWKS()
	require.NoError(t, err)
	var set struct{ Keys []struct{ Kid string } }
	require.NoError(t, json.Unmarshal(raw, &set))
	var kids []string
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	return kids
}

func TestJWKSShape(t *testing.T) {
	f := newFixture(t)
	rec := f.ks.Records()[0]
	raw, err := f.ks.JWKS()
	require.NoError(t, err)

	var set map[string][]map[string]any
	require.NoError(t, json.Unmarshal(raw, &set))
	require.Equal(t, []string{"keys"}, slices.Collect(maps.Keys(set)))
	require.Len(t, set["keys"], 1)
	k := set["keys"][0]
	require.Equal(t, map[string]any{
		"kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": rec.KID,
		"x": base64.RawURLEncoding.EncodeToString(rec.Public()),
	}, k, "public members only: no d")

	// The kid is the RFC 7638 thumbprint, recomputable from the JWK itself.
	tp, err := thumbprint(rec.Public())
	require.NoError(t, err)
	require.Equal(t, tp, rec.KID)
}

func TestDiscoveryDocument(t *testing.T) {
	raw, err := DiscoveryDocument(testIssuer + "/")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, testIssuer+"/", doc["issuer"])
	require.Equal(t, testIssuer+"/.well-known/jwks.json", doc["jwks_uri"])
	require.Equal(t, []any{"EdDSA"}, doc["id_token_signing_alg_values_supported"])
	require.Equal(t, []any{"id_token"}, doc["response_types_supported"])
	require.Equal(t, []any{"public"}, doc["subject_types_supported"])
	require.Contains(t, doc["claims_supported"], "run_id")
	require.Contains(t, doc["claims_supported"], "grants")
	_, err = DiscoveryDocument("")
	require.Error(t, err)
}

func testBox(t testing.TB) *Box {
	b, err := NewBox(make([]byte, 32))
	require.NoError(t, err)
	return b
}

func TestMarshalKey(t *testing.T) {
	box := testBox(t)
	rec, err := GenerateKey(t0)
	require.NoError(t, err)
	rec.RetiredAt = t0.Add(time.Hour)

	sealed, err := MarshalKey(box, rec)
	require.NoError(t, err)
	require.NotContains(t, string(sealed), string(rec.Private.Seed()))
	got, err := UnmarshalKey(box, rec.KID, sealed)
	require.NoError(t, err)
	require.Equal(t, rec.KID, got.KID)
	require.True(t, rec.Private.Equal(got.Private))
	require.True(t, rec.CreatedAt.Equal(got.CreatedAt))
	require.True(t, rec.RetiredAt.Equal(got.RetiredAt))

	other, err := GenerateKey(t0)
	require.NoError(t, err)
	_, err = UnmarshalKey(box, other.KID, sealed) // copied under another kid
	require.ErrorIs(t, err, ErrSealedInvalid)

	otherBox, err := NewBox(append(make([]byte, 31), 1))
	require.NoError(t, err)
	_, err = UnmarshalKey(otherBox, rec.KID, sealed)
	require.ErrorIs(t, err, ErrSealedInvalid)
}

type memKeyStore struct {
	mu   sync.Mutex
	rows map[string][]byte
}

func (m *memKeyStore) ListKeys(context.Context) ([]SealedKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []SealedKey
	for kid, s := range m.rows {
		out = append(out, SealedKey{KID: kid, Sealed: s})
	}
	return out, nil
}

func (m *memKeyStore) PutKey(_ context.Context, k SealedKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rows == nil {
		m.rows = map[string][]byte{}
	}
	m.rows[k.KID] = k.Sealed
	return nil
}

func (m *memKeyStore) DeleteKey(_ context.Context, kid string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, kid)
	return nil
}

func TestLoadKeySetPersistence(t *testing.T) {
	ctx := context.Background()
	box := testBox(t)
	st := &memKeyStore{}

	ks, err := LoadKeySet(ctx, st, box, time.Hour, t0)
	require.NoError(t, err)
	require.Len(t, st.rows, 1, "first start creates and stores a key")
	first, _, err := ks.SigningKey()
	require.NoError(t, err)

	again, err := LoadKeySet(ctx, st, box, time.Hour, t0)
	require.NoError(t, err)
	kid, _, err := again.SigningKey()
	require.NoError(t, err)
	require.Equal(t, first, kid, "a restart reuses the stored key")

	rec, err := ks.RotateAndSave(ctx, st, box, t0.Add(time.Minute))
	require.NoError(t, err)
	reloaded, err := LoadKeySet(ctx, st, box, time.Hour, t0.Add(time.Minute))
	require.NoError(t, err)
	kid, _, err = reloaded.SigningKey()
	require.NoError(t, err)
	require.Equal(t, rec.KID, kid)
	require.Len(t, reloaded.Records(), 2)
	require.False(t, reloaded.Records()[0].Active(), "retirement was persisted")

	dropped, err := ks.PruneAndSave(ctx, st, t0.Add(3*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{first}, dropped)
	require.Len(t, st.rows, 1)
	_, ok := st.rows[first]
	require.False(t, ok)

	// A wrong server key refuses to load rather than minting a fresh key.
	otherBox, err := NewBox(append(make([]byte, 31), 1))
	require.NoError(t, err)
	_, err = LoadKeySet(ctx, st, otherBox, time.Hour, t0)
	require.ErrorIs(t, err, ErrSealedInvalid)
}

func TestKeySetConcurrent(t *testing.T) {
	f := newFixture(t)
	// require must not be called off the test goroutine: collect errors.
	errs := make(chan error, 4*20*3)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 20 {
				if i == 0 && j%5 == 0 {
					_, _, err := f.ks.Rotate(t0)
					errs <- err
					continue
				}
				tok, _, err := f.iss.Mint(testIdentity())
				errs <- err
				if err == nil {
					_, err = f.ver.Verify(tok)
					errs <- err
				}
				_, err = f.ks.JWKS()
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
