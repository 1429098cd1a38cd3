package authn_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

const (
	testNonce = "AAECAwQFBgcICQoLDA0ODw"
	testPath  = "/v1/runner/attempt/result"
)

// signed builds a real *http.Request signed with protocol.Sign.
func signed(t testing.TB, key ed25519.PrivateKey, sr *protocol.SignedRequest) *http.Request {
	t.Helper()
	sig, err := protocol.Sign(key, sr)
	require.NoError(t, err)
	target := sr.Path
	if sr.RawQuery != "" {
		target += "?" + sr.RawQuery
	}
	r := httptest.NewRequest(sr.Method, target, bytes.NewReader(sr.Body))
	setHeaders(r.Header, sr, sig)
	return r
}

func setHeaders(h http.Header, sr *protocol.SignedRequest, sig string) {
	h.Set(protocol.HeaderRunner, sr.Runner)
	h.Set(protocol.HeaderTimestamp, sr.Timestamp)
	h.Set(protocol.HeaderNonce, sr.Nonce)
	h.Set(protocol.HeaderSignature, sig)
	for k, v := range map[string]string{protocol.HeaderRun: sr.Run, protocol.HeaderAttempt: sr.Attempt, protocol.HeaderLease: sr.Lease} {
		if v != "" {
			h.Set(k, v)
		}
	}
}

// nonceFailStore is the real store whose nonce table cannot be written (the
// database is slow or gone, a toxiproxy `timeout` in front of PostgreSQL).
type nonceFailStore struct {
	store.Store
	touchFails bool
}

func (s *nonceFailStore) NonceInsert(context.Context, string, string, time.Time) error {
	if s.touchFails {
		return s.Store.NonceInsert(context.Background(), "x", "y", epoch) // works; the touch fails
	}
	return errors.New("test: read tcp 127.0.0.1:5432: i/o timeout")
}

func (s *nonceFailStore) RunnerTouch(ctx context.Context, id string, now *time.Time) error {
	if s.touchFails {
		return errors.New("test: connection reset by peer")
	}
	return s.Store.RunnerTouch(ctx, id, now)
}

// TestS7_NonceStoreUnavailableFailsClosed: a request whose nonce cannot be
// recorded is refused with 503 unavailable, never accepted.
func TestS7_NonceStoreUnavailableFailsClosed(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		ctx := context.Background()
		pub, priv, err := ed25519.GenerateKey(nil)
		require.NoError(t, err)
		rn := &store.Runner{ID: "rnr_s7", Tenant: "t", Pool: "default", Name: "s7", Labels: []string{},
			PublicKey: protocol.EncodeKey(pub), KeyFingerprint: "x", Status: store.RunnerActive, AllowedRepos: []string{}, CreatedAt: epoch}
		require.NoError(t, st.RunnerCreate(ctx, rn))
		fc := clock.NewFake(epoch)
		req := func(nonce string) *http.Request {
			return signed(t, priv, &protocol.SignedRequest{
				Method: "POST", Path: testPath, Timestamp: strconv.FormatInt(epoch.Unix(), 10), Nonce: nonce,
				Runner: rn.ID, Run: "run_1", Attempt: "att_1", Lease: "tok", Body: []byte(`{"outcome":"succeeded"}`),
			})
		}
		for _, touchFails := range []bool{false, true} {
			a := &authn.Authenticator{Store: &nonceFailStore{Store: st, touchFails: touchFails}, Clock: fc}
			call, err := a.VerifyRunner(ctx, req(testNonce+strconv.FormatBool(touchFails)))
			require.ErrorIs(t, err, protocol.ErrUnavailable, "touchFails=%v", touchFails)
			require.Nil(t, call)
			var pe *protocol.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, http.StatusServiceUnavailable, pe.Status)
		}
		// Control: the same request against the healthy store is accepted,
		// so the refusals above came from the fault and nothing else.
		a := &authn.Authenticator{Store: st, Clock: fc}
		call, err := a.VerifyRunner(ctx, req(testNonce+"ok"))
		require.NoError(t, err)
		require.Equal(t, rn.ID, call.Runner.ID)
	})
}

// memStore is an in-memory authn.Store for the fuzzer.
type memStore struct {
	mu      sync.Mutex
	runners map[string]*store.Runner
	nonces  map[string]bool
}

func (m *memStore) APITokenGetByDigest(context.Context, string) (*store.APIToken, *store.Principal, error) {
	return nil, nil, store.ErrNotFound
}

func (m *memStore) NonceInsert(_ context.Context, runnerID, nonce string, _ time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := runnerID + "\x00" + nonce
	if m.nonces[k] {
		return store.ErrAlreadyExists
	}
	m.nonces[k] = true
	return nil
}

func (m *memStore) RunnerGetByID(_ context.Context, id string, _ bool) (*store.Runner, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runners[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	c := *r
	return &c, nil
}

func (m *memStore) RunnerTouch(context.Context, string, *time.Time) error { return nil }

// FuzzVerifyRequest: random headers, body and key material against
// VerifyRunner. It never panics (ed25519.Verify panics on a key of the wrong
// length), and it never accepts a request unless its signature is the
// registered key's valid signature of exactly what arrived.
//
// The fuzzer signs its own request with a key derived from keySeed, then
// applies one mutation (mut selects which): none, a body byte, a signed ID,
// the signature itself, another registered key, a stored key of a bad length
// or encoding, the path, the timestamp, the method, the query, or a repeated
// header. Only mutation "none" (or a mutation that happened to change
// nothing) may be accepted.
func FuzzVerifyRequest(f *testing.F) {
	f.Add([]byte("seed"), "POST", testPath, "", int64(0), testNonce, "run_1", "att_1", "lease", []byte(`{"outcome":"succeeded"}`), uint8(0), "")
	f.Add([]byte("seed"), "POST", testPath, "", int64(0), testNonce, "run_1", "att_1", "lease", []byte(`{}`), uint8(1), "x")
	f.Add([]byte("k"), "GET", "/v1/runner/example", "c=/&b=x y&a=2&a=1", int64(59), testNonce, "", "", "", []byte{}, uint8(2), "run_2")
	f.Add([]byte("k"), "POST", "/v1/runner/claim", "", int64(-61), testNonce, "", "", "", []byte(`{"wait_seconds":1}`), uint8(3), "AAAA")
	f.Add([]byte("k"), "POST", "/v1/runner/claim", "", int64(0), testNonce, "", "", "", []byte{}, uint8(4), "other")
	f.Add([]byte("k"), "POST", "/v1/runner/claim", "", int64(0), testNonce, "", "", "", []byte{}, uint8(5), "AAAA")
	f.Add([]byte("k"), "POST", "/v1//runner/../claim", "", int64(0), testNonce, "", "", "", []byte{}, uint8(6), "/v1/runner/claim")
	f.Add([]byte("k"), "POST", "/v1/runner/claim", "", int64(0), "short", "", "", "", []byte{}, uint8(7), "+1")
	f.Add([]byte("k"), "post", "/v1/runner/claim", "a=1", int64(0), testNonce, "r", "a", "l", []byte{}, uint8(8), "GET")
	f.Add([]byte("k"), "POST", "/v1/runner/claim", "a=1;b", int64(0), testNonce, "r", "a", "l", []byte{}, uint8(9), "a=2")
	f.Add([]byte("k"), "POST", "/v1/runner/claim", "", int64(0), testNonce, "r", "a", "l", []byte{}, uint8(10), "att_2")

	fc := clock.NewFake(epoch)
	f.Fuzz(func(t *testing.T, keySeed []byte, method, path, query string, skew int64, nonce, run, attempt, lease string, body []byte, mut uint8, alt string) {
		seed := sha256.Sum256(keySeed)
		key := ed25519.NewKeyFromSeed(seed[:])
		storedKey := protocol.EncodeKey(key.Public().(ed25519.PublicKey))
		sr := &protocol.SignedRequest{
			Method: method, Path: path, RawQuery: query, Timestamp: strconv.FormatInt(epoch.Unix()+skew%200, 10),
			Nonce: nonce, Runner: "rnr_fuzz", Run: run, Attempt: attempt, Lease: lease, Body: body,
		}
		sig, err := protocol.Sign(key, sr)
		if err != nil {
			sig = alt // not signable: present whatever the fuzzer has
		}
		wire := *sr
		wire.Body = bytes.Clone(body)
		extraHeader := ""
		switch mut % 11 {
		case 0:
		case 1:
			if len(wire.Body) == 0 {
				wire.Body = []byte(alt)
			} else {
				wire.Body[len(alt)%len(wire.Body)] ^= 0x01
			}
		case 2:
			wire.Run = alt
		case 3:
			sig = alt
		case 4:
			other := sha256.Sum256(append([]byte("other"), alt...))
			storedKey = protocol.EncodeKey(ed25519.NewKeyFromSeed(other[:]).Public().(ed25519.PublicKey))
		case 5:
			storedKey = alt // wrong length or not base64url: must not panic
		case 6:
			wire.Path = alt
		case 7:
			wire.Timestamp = alt
		case 8:
			wire.Method = alt
		case 9:
			wire.RawQuery = alt
		case 10:
			wire.Attempt = alt
			extraHeader = protocol.HeaderAttempt
		}
		ms := &memStore{
			runners: map[string]*store.Runner{"rnr_fuzz": {ID: "rnr_fuzz", Tenant: "t", Pool: "p", PublicKey: storedKey, Status: store.RunnerActive}},
			nonces:  map[string]bool{},
		}
		r := &http.Request{
			Method: wire.Method, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(wire.Body)),
			ContentLength: int64(len(wire.Body)), RequestURI: wire.Path,
		}
		if wire.RawQuery != "" {
			r.RequestURI += "?" + wire.RawQuery
		}
		setHeaders(r.Header, &wire, sig)
		if extraHeader != "" {
			r.Header.Add(extraHeader, sr.Attempt) // a second, signed value
		}
		a := &authn.Authenticator{Store: ms, Clock: fc}
		call, err := a.VerifyRunner(context.Background(), r)
		if err != nil {
			require.Nil(t, call)
			var pe *protocol.Error
			require.ErrorAs(t, err, &pe, "every refusal is a protocol error: %v", err)
			return
		}
		// Accepted: it must be exactly the signed request, under the key the
		// store holds, inside the window.
		pub, perr := protocol.DecodePublicKey(storedKey)
		require.NoError(t, perr, "accepted with an unusable stored key")
		require.True(t, protocol.Verify(pub, &wire, sig), "accepted a request whose signature does not verify")
		sameQuery := func(a, b string) bool {
			x, err1 := protocol.CanonicalQuery(a)
			y, err2 := protocol.CanonicalQuery(b)
			return err1 == nil && err2 == nil && x == y
		}
		require.True(t, wire.Method == sr.Method || bytes.EqualFold([]byte(wire.Method), []byte(sr.Method)), "method")
		require.Equal(t, sr.Path, wire.Path)
		require.True(t, sameQuery(sr.RawQuery, wire.RawQuery), "query")
		require.Equal(t, sr.Timestamp, wire.Timestamp)
		require.Equal(t, sr.Run, wire.Run)
		require.Equal(t, sr.Attempt, wire.Attempt)
		require.True(t, bytes.Equal(body, wire.Body), "body")
		require.Equal(t, "", extraHeader, "accepted a repeated signed header")
		require.Equal(t, sr.Run, call.Run)
		require.Equal(t, sr.Attempt, call.Attempt)
		require.Equal(t, sr.Lease, call.Lease)
		require.True(t, bytes.Equal(body, call.Body), "body")
		require.True(t, protocol.ValidNonce(nonce))
		require.LessOrEqual(t, skew%200, int64(60))
		require.GreaterOrEqual(t, skew%200, int64(-60))
		// And the same bytes again are a replay.
		r2 := r.Clone(context.Background())
		r2.Body = io.NopCloser(bytes.NewReader(wire.Body))
		_, err = a.VerifyRunner(context.Background(), r2)
		require.ErrorIs(t, err, protocol.ErrNonceReused)
	})
}
