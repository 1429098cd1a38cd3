package authn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// DefaultSkew is the signed-request clock tolerance.
const DefaultSkew = 60 * time.Second

// Digest is the stored form of a bearer secret.
func Digest(secret string) string { return principal.Digest(secret) }

// Store is what authn needs of the database.
type Store interface {
	APITokenGetByDigest(ctx context.Context, digest string) (*store.APIToken, *store.Principal, error)
	NonceInsert(ctx context.Context, runnerID, nonce string, expiresAt time.Time) error
	RunnerGetByID(ctx context.Context, id string, forUpdate bool) (*store.Runner, error)
	RunnerTouch(ctx context.Context, id string, now *time.Time) error
}

// Authenticator checks API tokens and runner signatures.
type Authenticator struct {
	Store Store
	Clock clock.Clock
	// Skew is the accepted distance between a runner's timestamp and server
	// time; nonces are kept for twice as long.
	Skew time.Duration
}

// NoncePurger forgets nonces past their retention (a store.Store).
type NoncePurger interface {
	NoncePurge(ctx context.Context, now *time.Time) (int, error)
}

// PurgeNonces forgets the nonces st keeps past their retention at clk's
// time.
func PurgeNonces(ctx context.Context, st NoncePurger, clk clock.Clock) (int, error) {
	ctx = store.WithSystem(ctx, "nonce purge") // cross-tenant by nature (docs/operations.md)
	n, err := st.NoncePurge(ctx, clk.NowOrNil())
	return n, store.Refusal(err)
}

// BearerToken extracts the token of an Authorization: Bearer header.
func BearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const p = "Bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(h[len(p):]), true
}

// Principal authenticates an API token.
func (a *Authenticator) Principal(ctx context.Context, r *http.Request) (*store.Principal, error) {
	tok, ok := BearerToken(r)
	if !ok {
		return nil, fmt.Errorf("missing bearer token: %w", protocol.ErrUnauthorized)
	}
	// The token is what tells the tenant: its lookup is cross-tenant.
	t, p, err := a.token(store.WithSystem(ctx, "authn"), Digest(tok))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("unknown token: %w", protocol.ErrUnauthorized)
	}
	if err != nil {
		return nil, fmt.Errorf("look up token: %w: %w", protocol.ErrUnavailable, err)
	}
	now := a.Clock.Now()
	if t.RevokedAt != nil || (t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)) {
		return nil, fmt.Errorf("token expired or revoked: %w", protocol.ErrUnauthorized)
	}
	return p, nil
}

// SignedCall is a verified runner request (principal.RunnerCall, which
// the run service takes without depending on authn).
type SignedCall = principal.RunnerCall

// ErrReplay is the refusal of a request whose nonce is known.
func ErrReplay() error { return fmt.Errorf("nonce already used: %w", protocol.ErrNonceReused) }

// RecordNonce records a call's pending nonce on its own, unless a
// transaction of its route did: a replay is ErrNonceReused, and a nonce
// that could not be recorded fails closed.
func (a *Authenticator) RecordNonce(ctx context.Context, p *store.PendingNonce) error {
	err := p.Record(ctx, a.Store)
	if errors.Is(err, store.ErrReplay) {
		return ErrReplay()
	}
	if err != nil {
		return fmt.Errorf("record nonce: %w: %w", protocol.ErrUnavailable, err)
	}
	return nil
}

// ReadBody reads at most protocol.MaxBodyBytes; more is ErrTooLarge after
// reading at most one byte past the limit.
func ReadBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > protocol.MaxBodyBytes {
		return nil, fmt.Errorf("body of %d bytes: %w", r.ContentLength, protocol.ErrTooLarge)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, protocol.MaxBodyBytes+1))
	if err != nil {
		return nil, protocol.BodyError(err)
	}
	if len(b) > protocol.MaxBodyBytes {
		return nil, fmt.Errorf("body over %d bytes: %w", protocol.MaxBodyBytes, protocol.ErrTooLarge)
	}
	return b, nil
}

// RawPath is the request path exactly as the client sent it.
func RawPath(r *http.Request) (path, query string) {
	u := r.RequestURI
	if u == "" { // a request built in-process rather than read off the wire
		return r.URL.EscapedPath(), r.URL.RawQuery
	}
	path, query, _ = strings.Cut(u, "?")
	return path, query
}

// VerifyRunner authenticates a signed runner request and consumes its nonce.
func (a *Authenticator) VerifyRunner(ctx context.Context, r *http.Request) (*SignedCall, error) {
	return a.verifyRunner(ctx, r, false)
}

// VerifyRunnerDeferred is VerifyRunner for a route that records the nonce
// in its own first transaction: the call's Nonce is pending, and the route
// must record it (store.Store.InTxNonce, or RecordNonce) before anything
// it does commits or any answer is written. It spares a hot call a statement and a commit of its
// own; a replay is refused as surely, by the same unique row.
func (a *Authenticator) VerifyRunnerDeferred(ctx context.Context, r *http.Request) (*SignedCall, error) {
	return a.verifyRunner(ctx, r, true)
}

func (a *Authenticator) verifyRunner(ctx context.Context, r *http.Request, deferNonce bool) (*SignedCall, error) {
	body, err := ReadBody(r)
	if err != nil {
		return nil, err
	}
	bad := func(why string) error { return fmt.Errorf("%s: %w", why, protocol.ErrSignatureInvalid) }
	h := r.Header
	runnerID := h.Get(protocol.HeaderRunner)
	ts := h.Get(protocol.HeaderTimestamp)
	nonce := h.Get(protocol.HeaderNonce)
	sig := h.Get(protocol.HeaderSignature)
	if runnerID == "" || ts == "" || nonce == "" || sig == "" {
		return nil, bad("missing signature headers")
	}
	for _, k := range []string{protocol.HeaderRunner, protocol.HeaderTimestamp, protocol.HeaderNonce, protocol.HeaderSignature, protocol.HeaderRun, protocol.HeaderAttempt, protocol.HeaderLease} {
		if len(h.Values(k)) > 1 {
			return nil, bad("repeated header " + k)
		}
	}
	if !protocol.ValidNonce(nonce) {
		return nil, bad("malformed nonce")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(sec, 10) != ts {
		return nil, bad("malformed timestamp")
	}
	path, query := RawPath(r)
	if protocol.CheckPath(path) != nil {
		return nil, bad("path is not canonical")
	}
	runner, err := a.runner(store.WithSystem(ctx, "authn"), runnerID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, bad("unknown runner")
	}
	if err != nil {
		return nil, fmt.Errorf("look up runner: %w: %w", protocol.ErrUnavailable, err)
	}
	pub, err := protocol.DecodePublicKey(runner.PublicKey)
	if err != nil {
		return nil, bad("runner key unusable")
	}
	ctx = store.WithTenant(ctx, runner.Tenant)
	call := &SignedCall{
		Runner:  runner,
		Run:     h.Get(protocol.HeaderRun),
		Attempt: h.Get(protocol.HeaderAttempt),
		Lease:   h.Get(protocol.HeaderLease),
		Body:    body,
	}
	req := &protocol.SignedRequest{
		Method: r.Method, Path: path, RawQuery: query, Timestamp: ts, Nonce: nonce,
		Runner: runnerID, Run: call.Run, Attempt: call.Attempt, Lease: call.Lease, Body: body,
	}
	if !protocol.Verify(pub, req, sig) {
		return nil, bad("signature does not verify")
	}
	skew := a.Skew
	if skew <= 0 {
		skew = DefaultSkew
	}
	now := a.Clock.Now()
	stamp := time.Unix(sec, 0)
	if d := now.Sub(stamp); d > skew || d < -skew {
		return nil, &SkewError{ServerTime: now, err: fmt.Errorf("timestamp %d is %s from server time: %w", sec, d.Round(time.Second), protocol.ErrTimestampSkew)}
	}
	// A replay is possible until its timestamp leaves the window, which is at
	// most 2×skew after now; keep the nonce a little longer than that.
	pending := store.NewPendingNonce(store.Nonce{RunnerID: runnerID, Nonce: nonce, ExpiresAt: now.Add(2*skew + time.Second).UTC()})
	// A disabled runner's request is refused after its nonce is recorded, as
	// The protocol orders the checks: its replay is refused as a replay.
	if !deferNonce || runner.Status != store.RunnerActive {
		if err := a.RecordNonce(ctx, pending); err != nil {
			return nil, err
		}
	} else {
		call.Nonce = pending
	}
	if runner.Status != store.RunnerActive {
		return nil, fmt.Errorf("runner %s is disabled: %w", runner.ID, protocol.ErrRunnerDisabled)
	}
	// Last-seen only feeds heartbeat freshness: refreshing it once a second
	// is enough, and saves a commit on most requests of a busy runner.
	if runner.LastSeenAt == nil || now.Sub(*runner.LastSeenAt) >= time.Second || now.Before(*runner.LastSeenAt) {
		if err := a.Store.RunnerTouch(ctx, runner.ID, a.Clock.NowOrNil()); err != nil {
			return nil, fmt.Errorf("touch runner: %w: %w", protocol.ErrUnavailable, err)
		}
	}
	return call, nil
}

// token reads an API token and its principal, through the store's cache
// when it has one (a revocation empties the entry at its commit; expiry is
// checked here, against the clock, on every request).
func (a *Authenticator) token(ctx context.Context, digest string) (*store.APIToken, *store.Principal, error) {
	if c, ok := a.Store.(interface {
		APITokenGetCached(ctx context.Context, digest string) (*store.APIToken, *store.Principal, error)
	}); ok {
		return c.APITokenGetCached(ctx, digest)
	}
	return a.Store.APITokenGetByDigest(ctx, digest)
}

// runner reads the runner a request names, through the store's cache when
// it has one (store.ReadCache: a change to the runner through any server
// empties its entry at that change's commit).
func (a *Authenticator) runner(ctx context.Context, id string) (*store.Runner, error) {
	if c, ok := a.Store.(interface {
		RunnerGetCached(ctx context.Context, id string) (*store.Runner, error)
	}); ok {
		return c.RunnerGetCached(ctx, id)
	}
	return a.Store.RunnerGetByID(ctx, id, false)
}

// SkewError is a refusal for timestamp skew. It carries the server's time so
// that the answer can tell a runner how far off its clock is: only a runner
// whose signature verified gets this far, and a corrected clock changes
// nothing about what the server accepts (its own clock decides).
type SkewError struct {
	ServerTime time.Time
	err        error
}

func (e *SkewError) Error() string { return e.err.Error() }
func (e *SkewError) Unwrap() error { return e.err }
