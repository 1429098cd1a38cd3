package apiclient

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
)

// MaxClaimWait is the longest claim long-poll the protocol allows.
const MaxClaimWait = 30

// AttemptRef names an assigned attempt and carries its lease token; every
// attempt-scoped request sends all three as signed headers.
type AttemptRef struct {
	RunID      string
	AttemptID  string
	LeaseToken string
}

// RunnerClient calls the runner API, signing every request with the runner's
// Ed25519 key. It is safe for concurrent use; set the fields before the first
// call and change the key only through RotateKey.
type RunnerClient struct {
	// BaseURL is the server's URL, when there is one server.
	BaseURL string
	// Servers, when set, replace BaseURL: the servers (replicas on one
	// database) in order of preference, failed over as failover describes.
	Servers []Server
	// OnFailover, when set, hears of every server a call found down, the
	// server it tries next and why.
	OnFailover func(from, to string, err error)
	// RunnerID is the ID the server returned at registration.
	RunnerID string
	// Key is the runner's current private key.
	Key ed25519.PrivateKey
	// HTTP is the HTTP client; nil uses one with DefaultTimeout. Its Timeout,
	// if any, must exceed the claim wait.
	HTTP *http.Client
	// Clock stamps Jobplane-Timestamp; nil is the real clock.
	Clock clock.Clock

	mu     sync.Mutex   // guards Key after the first call
	offset atomic.Int64 // server clock − Clock, learnt from timestamp_skew (ns)
	fo     failover
}

func (c *RunnerClient) key() ed25519.PrivateKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Key
}

// now is the time to sign with: the clock corrected by what the server
// last said of it.
func (c *RunnerClient) now() time.Time {
	var t time.Time
	if c.Clock == nil {
		t = clock.Real{}.Now()
	} else {
		t = c.Clock.Now()
	}
	return t.Add(time.Duration(c.offset.Load()))
}

// learnSkew adopts the server's clock from a timestamp_skew refusal of a
// request signed at signed with offset off, and reports whether a retry may
// now pass. Concurrent refusals store the same correction, never add up.
func (c *RunnerClient) learnSkew(err error, signed, off int64) bool {
	var ae *APIError
	if !errors.As(err, &ae) || ae.Problem.Code != protocol.CodeTimestampSkew || ae.Problem.ServerTime == 0 {
		return false
	}
	c.offset.Store(off + int64(time.Duration(ae.Problem.ServerTime-signed)*time.Second))
	return true
}

// NewNonce returns a fresh nonce: 16 random bytes, 22 base64url characters.
func NewNonce() string { return id.Secret(16) }

// do sends one signed POST. The timestamp and nonce are taken here, at send
// time, so a retried call is a new request and never a replay.
func (c *RunnerClient) do(ctx context.Context, ref *AttemptRef, in, out any, segs ...string) (int, error) {
	return c.doWithKey(ctx, c.key(), ref, in, out, segs...)
}

// doWithKey signs and sends; a refusal for timestamp skew that says the
// server's time is retried once, as a new request, with corrected stamps
// (the request was refused before it could have any effect). The worker's
// own deadlines never use this correction: they are measured on its clock.
func (c *RunnerClient) doWithKey(ctx context.Context, key ed25519.PrivateKey, ref *AttemptRef, in, out any, segs ...string) (int, error) {
	return c.onServers(ctx, func(ctx context.Context, s Server) (int, error) {
		off, signed := c.offset.Load(), c.now().Unix()
		status, err := c.doOnce(ctx, s, key, ref, in, out, segs...)
		if err != nil && c.learnSkew(err, signed, off) {
			return c.doOnce(ctx, s, key, ref, in, out, segs...)
		}
		return status, err
	})
}

func (c *RunnerClient) doOnce(ctx context.Context, s Server, key ed25519.PrivateKey, ref *AttemptRef, in, out any, segs ...string) (int, error) {
	if c.RunnerID == "" || len(key) != ed25519.PrivateKeySize {
		return 0, errors.New("runner client has no runner id or key")
	}
	u, err := endpoint(s.URL, nil, segs...)
	if err != nil {
		return 0, err
	}
	body, err := jsonBody(in)
	if err != nil {
		return 0, err
	}
	if body == nil {
		body = []byte("{}")
	}
	req, err := newRequest(ctx, http.MethodPost, u, body)
	if err != nil {
		return 0, err
	}
	sr := protocol.SignedRequest{
		Method: req.Method,
		// Sign what goes on the wire: the escaped path and raw query of the
		// request line.
		Path:      req.URL.EscapedPath(),
		RawQuery:  req.URL.RawQuery,
		Timestamp: strconv.FormatInt(c.now().Unix(), 10),
		Nonce:     NewNonce(),
		Runner:    c.RunnerID,
		Body:      body,
	}
	if ref != nil {
		sr.Run, sr.Attempt, sr.Lease = ref.RunID, ref.AttemptID, ref.LeaseToken
	}
	sig, err := protocol.Sign(key, &sr)
	if err != nil {
		return 0, fmt.Errorf("sign request: %w", err)
	}
	h := req.Header
	h.Set(protocol.HeaderRunner, sr.Runner)
	h.Set(protocol.HeaderTimestamp, sr.Timestamp)
	h.Set(protocol.HeaderNonce, sr.Nonce)
	if ref != nil {
		h.Set(protocol.HeaderRun, sr.Run)
		h.Set(protocol.HeaderAttempt, sr.Attempt)
		h.Set(protocol.HeaderLease, sr.Lease)
	}
	h.Set(protocol.HeaderSignature, sig)
	return send(c.httpFor(s), req, out)
}

// Register registers a runner with a single-use registration token (bearer,
// unsigned). It needs only BaseURL (and HTTP); store the returned RunnerID.
// A lost answer cannot be retried: the token is spent.
func (c *RunnerClient) Register(ctx context.Context, regToken string, req protocol.RegisterRequest) (*protocol.RegisterResponse, error) {
	var resp protocol.RegisterResponse
	if err := c.postBearer(ctx, regToken, req, &resp, "v1", "runner", "register"); err != nil {
		return nil, err
	}
	return &resp, nil
}

// postBearer POSTs req as JSON to the path under BaseURL with a bearer
// token instead of a signature (registration, the Actions exchange), and
// decodes the answer into out.
func (c *RunnerClient) postBearer(ctx context.Context, token string, req, out any, path ...string) error {
	body, err := jsonBody(req)
	if err != nil {
		return err
	}
	_, err = c.onServers(ctx, func(ctx context.Context, s Server) (int, error) {
		u, err := endpoint(s.URL, nil, path...)
		if err != nil {
			return 0, err
		}
		hr, err := newRequest(ctx, http.MethodPost, u, body)
		if err != nil {
			return 0, err
		}
		hr.Header.Set("Authorization", "Bearer "+token)
		return send(c.httpFor(s), hr, out)
	})
	return err
}

// httpFor is the HTTP client that reaches s.
func (c *RunnerClient) httpFor(s Server) *http.Client {
	if s.HTTP != nil {
		return s.HTTP
	}
	return c.HTTP
}

// claimTimeoutOK checks that no server's HTTP client gives up before a
// claim of waitSeconds is answered.
func (c *RunnerClient) claimTimeoutOK(waitSeconds int) error {
	for _, s := range c.servers() {
		if hc := c.httpFor(s); hc != nil && hc.Timeout != 0 && hc.Timeout <= time.Duration(waitSeconds)*time.Second {
			return fmt.Errorf("http client timeout %s does not exceed the claim wait of %d s", hc.Timeout, waitSeconds)
		}
	}
	return nil
}

// Heartbeat reports the runner's status and learns which attempts to cancel.
func (c *RunnerClient) Heartbeat(ctx context.Context, req protocol.HeartbeatRequest) (*protocol.HeartbeatResponse, error) {
	if req.Attempts == nil {
		req.Attempts = []string{}
	}
	var resp protocol.HeartbeatResponse
	if _, err := c.do(ctx, nil, req, &resp, "v1", "runner", "heartbeat"); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Claim long-polls for an assignment for up to waitSeconds (0..30). It
// returns nil, nil when nothing was eligible. Retry a claim whose answer was
// lost with the same requestID: the server then returns the same assignment
// instead of leasing a second one.
func (c *RunnerClient) Claim(ctx context.Context, waitSeconds int, requestID string) (*protocol.Assignment, error) {
	if waitSeconds < 0 || waitSeconds > MaxClaimWait {
		return nil, fmt.Errorf("claim wait %d s is outside 0..%d", waitSeconds, MaxClaimWait)
	}
	if err := c.claimTimeoutOK(waitSeconds); err != nil {
		return nil, err
	}
	var a protocol.Assignment
	status, err := c.do(ctx, nil, protocol.ClaimRequest{WaitSeconds: waitSeconds, RequestID: requestID}, &a, "v1", "runner", "claim")
	if err != nil {
		return nil, err
	}
	if status == http.StatusNoContent || a.AttemptID == "" {
		return nil, nil
	}
	return &a, nil
}

// ClaimMany is Claim for up to max attempts (1..protocol.MaxClaimBatch) in
// one request: it returns between one and max assignments, or none when
// nothing was eligible. A retry with the same requestID returns those of the
// lost answer whose leases still live.
func (c *RunnerClient) ClaimMany(ctx context.Context, waitSeconds, max int, requestID string) ([]*protocol.Assignment, error) {
	if waitSeconds < 0 || waitSeconds > MaxClaimWait {
		return nil, fmt.Errorf("claim wait %d s is outside 0..%d", waitSeconds, MaxClaimWait)
	}
	if max < 1 || max > protocol.MaxClaimBatch {
		return nil, fmt.Errorf("claim max %d is outside 1..%d", max, protocol.MaxClaimBatch)
	}
	if err := c.claimTimeoutOK(waitSeconds); err != nil {
		return nil, err
	}
	// A server that predates max answers one assignment object: it is
	// taken as a batch of one rather than lost.
	var b struct {
		protocol.ClaimBatch
		protocol.Assignment
	}
	status, err := c.do(ctx, nil, protocol.ClaimRequest{WaitSeconds: waitSeconds, RequestID: requestID, Max: max}, &b, "v1", "runner", "claim")
	if err != nil {
		return nil, err
	}
	if status == http.StatusNoContent {
		return nil, nil
	}
	if b.Assignments == nil && b.AttemptID != "" {
		return []*protocol.Assignment{&b.Assignment}, nil
	}
	if len(b.Assignments) > max {
		return nil, fmt.Errorf("claim: the server answered %d assignments for max %d", len(b.Assignments), max)
	}
	for _, a := range b.Assignments {
		if a == nil || a.AttemptID == "" {
			return nil, fmt.Errorf("claim: the server answered an empty assignment")
		}
	}
	return b.Assignments, nil
}

// Renew extends the attempt's lease; the answer also says whether the run's
// cancellation was requested.
func (c *RunnerClient) Renew(ctx context.Context, ref AttemptRef) (*protocol.RenewResponse, error) {
	var resp protocol.RenewResponse
	if _, err := c.do(ctx, &ref, struct{}{}, &resp, "v1", "runner", "attempt", "renew"); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Logs sends one chunk of log lines. Resending a chunk with the same Seq is
// harmless: the server ignores it.
func (c *RunnerClient) Logs(ctx context.Context, ref AttemptRef, req protocol.LogsRequest) error {
	_, err := c.do(ctx, &ref, req, nil, "v1", "runner", "attempt", "logs")
	return err
}

// Relinquish gives the attempt back; the run gets a fresh attempt that does
// not count as a retry.
func (c *RunnerClient) Relinquish(ctx context.Context, ref AttemptRef, reason string) error {
	_, err := c.do(ctx, &ref, protocol.RelinquishRequest{Reason: reason}, nil, "v1", "runner", "attempt", "relinquish")
	return err
}

// Result reports the attempt's outcome. Retry with the same RequestID until
// it is accepted; the same result again is answered 200.
func (c *RunnerClient) Result(ctx context.Context, ref AttemptRef, req protocol.ResultRequest) (*protocol.ResultResponse, error) {
	if req.Artifacts == nil {
		req.Artifacts = []string{}
	}
	var resp protocol.ResultResponse
	if _, err := c.do(ctx, &ref, req, &resp, "v1", "runner", "attempt", "result"); err != nil {
		return nil, err
	}
	return &resp, nil
}

// ResultItem is one attempt's result for Results.
type ResultItem struct {
	Ref    AttemptRef
	Result protocol.ResultRequest
}

// ResultAnswer is Results' answer for one item: the run's state, or Err
// (an *APIError) when the server refused that item alone.
type ResultAnswer struct {
	RunState string
	Err      error
}

// Results reports the results of several attempts in one signed call (POST
// /v1/runner/results), answered item by item in the items' order. The call
// fails as a whole (err) only when nothing of it was recorded, or when the
// answer was lost; retrying the same items then is safe, as it is for
// Result: a result already recorded is acknowledged again.
func (c *RunnerClient) Results(ctx context.Context, items []ResultItem) ([]ResultAnswer, error) {
	if len(items) == 0 || len(items) > protocol.MaxResultsBatch {
		return nil, fmt.Errorf("results: %d items, want 1..%d", len(items), protocol.MaxResultsBatch)
	}
	req := protocol.ResultsRequest{Results: make([]protocol.ResultItem, len(items))}
	for i, it := range items {
		r := it.Result
		if r.Artifacts == nil {
			r.Artifacts = []string{}
		}
		req.Results[i] = protocol.ResultItem{RunID: it.Ref.RunID, AttemptID: it.Ref.AttemptID, LeaseToken: it.Ref.LeaseToken, ResultRequest: r}
	}
	var resp protocol.ResultsResponse
	if _, err := c.do(ctx, nil, req, &resp, "v1", "runner", "results"); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(items) {
		return nil, fmt.Errorf("results: %d answers for %d items", len(resp.Results), len(items))
	}
	out := make([]ResultAnswer, len(items))
	for i, a := range resp.Results {
		if a.AttemptID != items[i].Ref.AttemptID {
			return nil, fmt.Errorf("results: answer %d is for attempt %s, not %s", i, a.AttemptID, items[i].Ref.AttemptID)
		}
		out[i].RunState = a.RunState
		if a.Error != nil {
			out[i].Err = &APIError{Status: a.Error.Status, Problem: *a.Error}
		}
	}
	return out, nil
}

// RotateKey replaces the runner's key: the request is signed with the current
// key and carries newKey's public half. On success the client signs with
// newKey from then on (the old key stops working at once on the server), so
// the caller must persist newKey before calling, or it may lose the runner's
// identity on a crash.
func (c *RunnerClient) RotateKey(ctx context.Context, newKey ed25519.PrivateKey) error {
	if len(newKey) != ed25519.PrivateKeySize {
		return errors.New("new key is not an ed25519 private key")
	}
	c.mu.Lock()
	defer c.mu.Unlock() // no other request may sign with the old key meanwhile
	pub := newKey.Public().(ed25519.PublicKey)
	req := protocol.RotateKeyRequest{PublicKey: protocol.EncodeKey(pub)}
	if _, err := c.doWithKey(ctx, c.Key, nil, req, nil, "v1", "runner", "keys"); err != nil {
		return err
	}
	c.Key = newKey
	return nil
}
