package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/jobplane/jobplane/internal/protocol"
)

// Client calls the control and admin API with a bearer API token. It is safe
// for concurrent use.
type Client struct {
	// BaseURL is the server's URL, e.g. "https://jobplane.example.com".
	BaseURL string
	// Token is the API bearer token; empty sends no Authorization header.
	Token string
	// HTTP is the HTTP client; nil uses one with DefaultTimeout. A client
	// used for FollowLogs should have no overall Timeout, since a followed
	// stream lasts as long as the run.
	HTTP *http.Client
}

// do sends one JSON request and decodes the answer into out.
func (c *Client) do(ctx context.Context, method string, query url.Values, in, out any, segs ...string) error {
	return c.doHeader(ctx, method, nil, query, in, out, segs...)
}

// doHeader is do with extra request headers.
func (c *Client) doHeader(ctx context.Context, method string, header http.Header, query url.Values, in, out any, segs ...string) error {
	u, err := endpoint(c.BaseURL, query, segs...)
	if err != nil {
		return err
	}
	body, err := jsonBody(in)
	if err != nil {
		return err
	}
	req, err := newRequest(ctx, method, u, body)
	if err != nil {
		return err
	}
	for k, vs := range header {
		req.Header[k] = slices.Clone(vs) // header may be shared, as preferMinimal is
	}
	c.authorize(req)
	_, err = send(c.HTTP, req, out)
	return err
}

func (c *Client) authorize(req *http.Request) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

// CreateRun starts a run (POST /v1/runs). The same IdempotencyKey again
// returns the run created the first time.
func (c *Client) CreateRun(ctx context.Context, req *protocol.RunRequest) (*protocol.Run, error) {
	var run protocol.Run
	if err := c.do(ctx, http.MethodPost, nil, req, &run, "v1", "runs"); err != nil {
		return nil, err
	}
	return &run, nil
}

// RunAnswer is CreateRuns' answer for one request: the run (Created when
// this call created it, not when its idempotency key named an earlier
// one), or Err (an *APIError) when the server refused that request alone.
type RunAnswer struct {
	Run     *protocol.Run
	Created bool
	Err     error
}

// CreateRuns requests several runs in one call (POST /v1/runs/batch),
// answered request by request in order: a refused request does not stop
// the others. The call fails as a whole (err) only when nothing of it was
// recorded, or when the answer was lost; retrying is then safe for the
// requests that carry idempotency keys.
func (c *Client) CreateRuns(ctx context.Context, reqs []protocol.RunRequest) ([]RunAnswer, error) {
	return c.createRuns(ctx, nil, reqs)
}

// preferMinimal asks the routes that request runs for protocol.RunBrief.
var preferMinimal = http.Header{"Prefer": {"return=minimal"}}

// CreateRunsBrief is CreateRuns for callers that need only to follow the
// runs: each run in the answers carries its ID, State, WaitingFor and
// CreatedAt alone (the server's protocol.RunBrief; "Prefer:
// return=minimal"), which costs both ends less than the whole run. A
// server that ignores the preference answers whole runs, which serve as
// well.
func (c *Client) CreateRunsBrief(ctx context.Context, reqs []protocol.RunRequest) ([]RunAnswer, error) {
	return c.createRuns(ctx, preferMinimal, reqs)
}

func (c *Client) createRuns(ctx context.Context, header http.Header, reqs []protocol.RunRequest) ([]RunAnswer, error) {
	if len(reqs) == 0 || len(reqs) > protocol.MaxRunBatch {
		return nil, fmt.Errorf("create runs: %d requests, want 1..%d", len(reqs), protocol.MaxRunBatch)
	}
	var resp protocol.RunsResponse
	if err := c.doHeader(ctx, http.MethodPost, header, nil, &protocol.RunsRequest{Runs: reqs}, &resp, "v1", "runs", "batch"); err != nil {
		return nil, err
	}
	if len(resp.Runs) != len(reqs) {
		return nil, fmt.Errorf("create runs: %d answers for %d requests", len(resp.Runs), len(reqs))
	}
	out := make([]RunAnswer, len(reqs))
	for i, a := range resp.Runs {
		switch {
		case a.Error != nil:
			out[i].Err = &APIError{Status: a.Error.Status, Problem: *a.Error}
		case a.Run == nil:
			return nil, fmt.Errorf("create runs: answer %d has neither a run nor an error", i)
		default:
			out[i].Run, out[i].Created = a.Run, a.Status == http.StatusCreated
		}
	}
	return out, nil
}

// GetRun returns one run.
func (c *Client) GetRun(ctx context.Context, runID string) (*protocol.Run, error) {
	var run protocol.Run
	if err := c.do(ctx, http.MethodGet, nil, nil, &run, "v1", "runs", runID); err != nil {
		return nil, err
	}
	return &run, nil
}

// ListRunsParams filters GET /v1/runs; zero fields are not sent.
type ListRunsParams struct {
	Job    string
	State  string
	Limit  int
	Cursor string
}

// ListRuns returns one page of runs, newest first; pass NextCursor back as
// Cursor for the next page.
func (c *Client) ListRuns(ctx context.Context, p ListRunsParams) (*protocol.RunList, error) {
	q := url.Values{}
	if p.Job != "" {
		q.Set("job", p.Job)
	}
	if p.State != "" {
		q.Set("state", p.State)
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	var list protocol.RunList
	if err := c.do(ctx, http.MethodGet, q, nil, &list, "v1", "runs"); err != nil {
		return nil, err
	}
	return &list, nil
}

// CancelRun asks for a run to be cancelled. The protocol answers 200; when
// the answer carries the run, it is returned, else the result is nil.
func (c *Client) CancelRun(ctx context.Context, runID string) (*protocol.Run, error) {
	var run protocol.Run
	if err := c.do(ctx, http.MethodPost, nil, nil, &run, "v1", "runs", runID, "cancel"); err != nil {
		return nil, err
	}
	if run.ID == "" {
		return nil, nil
	}
	return &run, nil
}

// ApproveRun approves a run waiting for approval.
func (c *Client) ApproveRun(ctx context.Context, runID, comment string) (*protocol.Run, error) {
	var run protocol.Run
	if err := c.do(ctx, http.MethodPost, nil, protocol.CommentRequest{Comment: comment}, &run, "v1", "runs", runID, "approve"); err != nil {
		return nil, err
	}
	return &run, nil
}

// RejectRun rejects a run waiting for approval.
func (c *Client) RejectRun(ctx context.Context, runID, comment string) (*protocol.Run, error) {
	var run protocol.Run
	if err := c.do(ctx, http.MethodPost, nil, protocol.CommentRequest{Comment: comment}, &run, "v1", "runs", runID, "reject"); err != nil {
		return nil, err
	}
	return &run, nil
}

// Logs returns the run's stored log lines with IDs greater than after.
func (c *Client) Logs(ctx context.Context, runID string, after int64) (*protocol.LogList, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	var list protocol.LogList
	if err := c.do(ctx, http.MethodGet, q, nil, &list, "v1", "runs", runID, "logs"); err != nil {
		return nil, err
	}
	return &list, nil
}

// CreateRegistrationToken makes a single-use runner registration token
// (admin).
func (c *Client) CreateRegistrationToken(ctx context.Context, req protocol.RegistrationTokenRequest) (*protocol.TokenResponse, error) {
	var tok protocol.TokenResponse
	if err := c.do(ctx, http.MethodPost, nil, req, &tok, "v1", "runners", "registration-tokens"); err != nil {
		return nil, err
	}
	return &tok, nil
}

// ListRunners returns the registered runners (admin).
func (c *Client) ListRunners(ctx context.Context) (*protocol.RunnerList, error) {
	var list protocol.RunnerList
	if err := c.do(ctx, http.MethodGet, nil, nil, &list, "v1", "runners"); err != nil {
		return nil, err
	}
	return &list, nil
}

// DisableRunner disables a runner (admin); its leased attempts end at once.
func (c *Client) DisableRunner(ctx context.Context, runnerID string) error {
	return c.do(ctx, http.MethodPost, nil, nil, nil, "v1", "runners", runnerID, "disable")
}

// EnableRunner enables a disabled runner (admin).
func (c *Client) EnableRunner(ctx context.Context, runnerID string) error {
	return c.do(ctx, http.MethodPost, nil, nil, nil, "v1", "runners", runnerID, "enable")
}

// CreatePrincipal creates a user or service principal (admin).
func (c *Client) CreatePrincipal(ctx context.Context, req protocol.PrincipalRequest) (*protocol.Principal, error) {
	var p protocol.Principal
	if err := c.do(ctx, http.MethodPost, nil, req, &p, "v1", "principals"); err != nil {
		return nil, err
	}
	return &p, nil
}

// CreatePrincipalToken issues an API token for a principal (admin). The
// token is shown only in this answer.
func (c *Client) CreatePrincipalToken(ctx context.Context, name string, req protocol.PrincipalTokenRequest) (*protocol.TokenResponse, error) {
	var tok protocol.TokenResponse
	if err := c.do(ctx, http.MethodPost, nil, req, &tok, "v1", "principals", name, "tokens"); err != nil {
		return nil, err
	}
	return &tok, nil
}

// RevokeToken revokes an API token by ID (admin).
func (c *Client) RevokeToken(ctx context.Context, tokenID string) error {
	return c.do(ctx, http.MethodDelete, nil, nil, nil, "v1", "tokens", tokenID)
}

// Health checks liveness (GET /healthz): nil means the server answered 2xx.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, nil, nil, nil, "healthz")
}

// RunConnectors fetches the connector credentials of the running job whose
// run token is c.Token.
func (c *Client) RunConnectors(ctx context.Context) (*protocol.RunConnectors, error) {
	var out protocol.RunConnectors
	if err := c.do(ctx, http.MethodGet, nil, nil, &out, "v1", "run", "connectors"); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunLease asks for the current lease of attempt, whose run token is
// c.Token (GET /v1/run/lease).
func (c *Client) RunLease(ctx context.Context, attempt string) (*protocol.RunLease, error) {
	var out protocol.RunLease
	if err := c.do(ctx, http.MethodGet, url.Values{"attempt": {attempt}}, nil, &out, "v1", "run", "lease"); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetSecret stores a secret value (admin); channel "" applies to every channel.
func (c *Client) SetSecret(ctx context.Context, name, channel, value string) error {
	var q url.Values
	if channel != "" {
		q = url.Values{"channel": {channel}}
	}
	return c.do(ctx, http.MethodPut, q, map[string]string{"value": value}, nil, "v1", "secrets", name)
}

// RotateSigningKeys makes a new run-token signing key (admin).
func (c *Client) RotateSigningKeys(ctx context.Context) (string, error) {
	var out protocol.SigningKeyRotation
	if err := c.do(ctx, http.MethodPost, nil, nil, &out, "v1", "admin", "signing-keys", "rotate"); err != nil {
		return "", err
	}
	return out.KID, nil
}

// PrunePlan lists what a retention sweep would delete now, of the
// caller's tenant, earliest due first (admin; limit 0: the server's
// default).
func (c *Client) PrunePlan(ctx context.Context, limit int) (*protocol.PrunePlan, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out protocol.PrunePlan
	if err := c.do(ctx, http.MethodGet, q, nil, &out, "v1", "admin", "prune"); err != nil {
		return nil, err
	}
	return &out, nil
}

// Prune runs a retention sweep now (admin).
func (c *Client) Prune(ctx context.Context) (*protocol.PruneReport, error) {
	var out protocol.PruneReport
	if err := c.do(ctx, http.MethodPost, nil, nil, &out, "v1", "admin", "prune"); err != nil {
		return nil, err
	}
	return &out, nil
}

// Audit reads audit events after a sequence number (admin).
func (c *Client) Audit(ctx context.Context, after int64, limit int) (*protocol.AuditList, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out protocol.AuditList
	if err := c.do(ctx, http.MethodGet, q, nil, &out, "v1", "audit"); err != nil {
		return nil, err
	}
	return &out, nil
}

// Leases lists held lease keys starting with prefix.
func (c *Client) Leases(ctx context.Context, prefix string) (json.RawMessage, error) {
	var q url.Values
	if prefix != "" {
		q = url.Values{"prefix": {prefix}}
	}
	var out json.RawMessage
	if err := c.do(ctx, http.MethodGet, q, nil, &out, "v1", "leases"); err != nil {
		return nil, err
	}
	return out, nil
}

// Lease shows one key: holders with fencing tokens, waiting runs.
func (c *Client) Lease(ctx context.Context, key string) (json.RawMessage, error) {
	var out json.RawMessage
	if err := c.do(ctx, http.MethodGet, nil, nil, &out, "v1", "leases", key); err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseLease force-releases a key (admin); the reason is required.
func (c *Client) ReleaseLease(ctx context.Context, key, reason string) (json.RawMessage, error) {
	var out json.RawMessage
	if err := c.do(ctx, http.MethodPost, nil, protocol.LeaseReleaseRequest{Reason: reason}, &out, "v1", "leases", key, "release"); err != nil {
		return nil, err
	}
	return out, nil
}

// VerifyLease asks whether a fencing token is still its key's current holder's.
func (c *Client) VerifyLease(ctx context.Context, key string, token int64) (bool, string, error) {
	var out protocol.LeaseVerification
	err := c.do(ctx, http.MethodPost, nil, protocol.LeaseVerifyRequest{Key: key, FencingToken: token}, &out, "v1", "leases", "verify")
	return out.Current, out.RunID, err
}
