package worker

import (
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
)

// fakeServer implements the runner side of the protocol faithfully enough
// for the agent: registration, signature and nonce checks, one lease per
// attempt, claim request_id replay, idempotent log seqs and results.
type fakeServer struct {
	t   *testing.T
	clk clock.Clock

	mu            sync.Mutex
	regToken      string
	runners       map[string]ed25519.PublicKey
	registrations int
	nonces        map[string]bool
	heartbeats    int
	queue         []*protocol.Assignment
	byRequest     map[string]*protocol.Assignment
	byBatch       map[string][]*protocol.Assignment
	claimMaxes    []int                           // max of each claim (0: one-attempt form)
	leased        map[string]*protocol.Assignment // attempt ID → assignment
	claimRequests []string
	// loseClaimAnswers answers this many successful claims with 503 after
	// "committing" them, as a server whose reply was lost would.
	loseClaimAnswers int
	renews           map[string]int
	// renew decides the answer to a renew of an attempt; nil is 200.
	renew        func(attemptID string, n int) (status int, code string, cancel bool)
	logs         map[string][]protocol.LogLine
	seqs         map[string][]int64
	results      map[string][]protocol.ResultRequest
	relinquished map[string]string
	// resultCalls lists the attempts of each result call, single or batch,
	// in arrival order; with holdFirstResult set, the first of them is
	// answered only once it is closed.
	resultCalls     [][]string
	holdFirstResult chan struct{}
	// noBatchRoute answers POST /v1/runner/results 404, as a server that
	// predates it would.
	noBatchRoute bool
	// traceparents lists the trace contexts requests carried.
	traceparents []string
	badRequests  []string
	// disabled answers claims 403 runner_disabled, as for a runner an
	// admin disabled.
	disabled bool
	changed  chan struct{}
}

func newFakeServer(t *testing.T, clk clock.Clock) *fakeServer {
	return &fakeServer{
		t: t, clk: clk, regToken: "reg-secret",
		runners: map[string]ed25519.PublicKey{}, nonces: map[string]bool{},
		byRequest: map[string]*protocol.Assignment{}, leased: map[string]*protocol.Assignment{},
		renews: map[string]int{}, logs: map[string][]protocol.LogLine{}, seqs: map[string][]int64{},
		results: map[string][]protocol.ResultRequest{}, relinquished: map[string]string{},
		changed: make(chan struct{}, 1),
	}
}

func (s *fakeServer) enqueue(a *protocol.Assignment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, a)
}

func (s *fakeServer) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func problem(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(protocol.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: code})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		problem(w, 400, protocol.CodeBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notify()
	if tp := r.Header.Get("Traceparent"); tp != "" {
		s.traceparents = append(s.traceparents, tp)
	}
	if r.Method != http.MethodPost {
		problem(w, 405, protocol.CodeBadRequest)
		return
	}
	if r.URL.Path == "/v1/runner/register" {
		if r.Header.Get("Authorization") != "Bearer "+s.regToken {
			problem(w, 401, protocol.CodeRegistrationTokenInvalid)
			return
		}
		var req protocol.RegisterRequest
		if json.Unmarshal(body, &req) != nil {
			problem(w, 400, protocol.CodeBadRequest)
			return
		}
		pub, err := protocol.DecodePublicKey(req.PublicKey)
		if err != nil {
			problem(w, 400, protocol.CodeBadRequest)
			return
		}
		s.regToken = "" // single use
		s.registrations++
		rid := id.New(id.Runner, time.Now())
		s.runners[rid] = pub
		reply(w, 201, protocol.RegisterResponse{RunnerID: rid, Tenant: "default", Pool: "p", Labels: req.Labels, Status: "active"})
		return
	}

	sr := protocol.SignedRequest{
		Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
		Timestamp: r.Header.Get(protocol.HeaderTimestamp), Nonce: r.Header.Get(protocol.HeaderNonce),
		Runner: r.Header.Get(protocol.HeaderRunner), Run: r.Header.Get(protocol.HeaderRun),
		Attempt: r.Header.Get(protocol.HeaderAttempt), Lease: r.Header.Get(protocol.HeaderLease), Body: body,
	}
	pub, ok := s.runners[sr.Runner]
	if !ok || !protocol.ValidNonce(sr.Nonce) || !protocol.Verify(pub, &sr, r.Header.Get(protocol.HeaderSignature)) {
		s.badRequests = append(s.badRequests, r.URL.Path+": signature")
		problem(w, 401, protocol.CodeSignatureInvalid)
		return
	}
	ts, err := strconv.ParseInt(sr.Timestamp, 10, 64)
	if err != nil || ts < s.clk.Now().Unix()-60 || ts > s.clk.Now().Unix()+60 {
		s.badRequests = append(s.badRequests, r.URL.Path+": skew")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(401)
		_ = json.NewEncoder(w).Encode(protocol.Problem{Type: "about:blank", Status: 401, Code: protocol.CodeTimestampSkew, ServerTime: s.clk.Now().Unix()})
		return
	}
	if s.nonces[sr.Nonce] {
		s.badRequests = append(s.badRequests, r.URL.Path+": nonce")
		problem(w, 401, protocol.CodeNonceReused)
		return
	}
	s.nonces[sr.Nonce] = true

	switch r.URL.Path {
	case "/v1/runner/heartbeat":
		s.heartbeats++
		reply(w, 200, protocol.HeartbeatResponse{ServerTime: s.clk.Now().UTC(), Status: "active", CancelAttempts: []string{}})
		return
	case "/v1/runner/claim":
		var req protocol.ClaimRequest
		if json.Unmarshal(body, &req) != nil || req.WaitSeconds < 0 || req.WaitSeconds > 30 {
			problem(w, 400, protocol.CodeBadRequest)
			return
		}
		s.claimRequests = append(s.claimRequests, req.RequestID)
		s.claimMaxes = append(s.claimMaxes, req.Max)
		if s.disabled {
			problem(w, 403, protocol.CodeRunnerDisabled)
			return
		}
		if req.Max > 0 {
			s.claimBatch(w, req)
			return
		}
		a := s.byRequest[req.RequestID]
		if a == nil && len(s.queue) > 0 {
			a, s.queue = s.queue[0], s.queue[1:]
			a.Lease.Token = id.Secret(24)
			s.leased[a.AttemptID] = a
			if req.RequestID != "" {
				s.byRequest[req.RequestID] = a
			}
		}
		if a == nil {
			// A short wait keeps idle slots cheap in tests.
			s.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			s.mu.Lock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if s.loseClaimAnswers > 0 {
			s.loseClaimAnswers--
			problem(w, 503, protocol.CodeRetry)
			return
		}
		reply(w, 200, a)
		return
	}

	if r.URL.Path == "/v1/runner/results" {
		if s.noBatchRoute {
			problem(w, 404, protocol.CodeNotFound)
			return
		}
		s.results_(w, sr, body)
		return
	}

	// Attempt-scoped routes: the headers must name a current lease.
	a := s.leased[sr.Attempt]
	if a == nil || a.RunID != sr.Run || a.Lease.Token != sr.Lease {
		problem(w, 409, protocol.CodeAttemptStale)
		return
	}
	switch r.URL.Path {
	case "/v1/runner/attempt/renew":
		s.renews[sr.Attempt]++
		status, code, cancel := 200, "", false
		if s.renew != nil {
			status, code, cancel = s.renew(sr.Attempt, s.renews[sr.Attempt])
		}
		if status != 200 {
			if code == protocol.CodeLeaseExpired {
				delete(s.leased, sr.Attempt)
			}
			problem(w, status, code)
			return
		}
		reply(w, 200, protocol.RenewResponse{ExpiresAt: s.clk.Now().Add(time.Duration(a.Lease.TTLSeconds) * time.Second).UTC(), CancelRequested: cancel})
	case "/v1/runner/attempt/logs":
		var req protocol.LogsRequest
		if json.Unmarshal(body, &req) != nil || req.Seq < 1 {
			problem(w, 400, protocol.CodeBadRequest)
			return
		}
		for _, seq := range s.seqs[sr.Attempt] {
			if seq == req.Seq {
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		s.seqs[sr.Attempt] = append(s.seqs[sr.Attempt], req.Seq)
		s.logs[sr.Attempt] = append(s.logs[sr.Attempt], req.Lines...)
		w.WriteHeader(http.StatusNoContent)
	case "/v1/runner/attempt/relinquish":
		var req protocol.RelinquishRequest
		_ = json.Unmarshal(body, &req)
		s.relinquished[sr.Attempt] = req.Reason
		delete(s.leased, sr.Attempt)
		reply(w, 200, map[string]string{"status": "relinquished"})
	case "/v1/runner/attempt/result":
		var req protocol.ResultRequest
		if json.Unmarshal(body, &req) != nil || (req.Outcome != "succeeded" && req.Outcome != "failed") {
			problem(w, 400, protocol.CodeBadRequest)
			return
		}
		s.holdResultCall([]string{sr.Attempt})
		s.record(sr.Attempt, req)
		reply(w, 200, protocol.ResultResponse{RunState: req.Outcome})
	default:
		problem(w, 404, protocol.CodeNotFound)
	}
}

// waitForResults waits until each attempt has a result.
func (s *fakeServer) waitForResults(t *testing.T, as []*protocol.Assignment) {
	t.Helper()
	s.waitFor(t, "results", 20*time.Second, func() bool {
		for _, a := range as {
			if len(s.results[a.AttemptID]) == 0 {
				return false
			}
		}
		return true
	})
}

// holdResultCall notes a result call and, for the first one while
// holdFirstResult is set, waits for it with s.mu released.
func (s *fakeServer) holdResultCall(attempts []string) {
	s.resultCalls = append(s.resultCalls, attempts)
	s.notify()
	if hold := s.holdFirstResult; hold != nil && len(s.resultCalls) == 1 {
		s.mu.Unlock()
		<-hold
		s.mu.Lock()
	}
}

// record stores a result and its final log chunk (idempotent by seq, as
// the logs call is); s.mu is held.
func (s *fakeServer) record(attempt string, req protocol.ResultRequest) {
	if l := req.Logs; l != nil && !slices.Contains(s.seqs[attempt], l.Seq) {
		s.seqs[attempt] = append(s.seqs[attempt], l.Seq)
		s.logs[attempt] = append(s.logs[attempt], l.Lines...)
	}
	s.results[attempt] = append(s.results[attempt], req)
}

// results_ answers POST /v1/runner/results as the server does: the call
// names no attempt in its headers, each item must name a current lease of
// the runner with its token, and items are answered one by one; s.mu is
// held.
func (s *fakeServer) results_(w http.ResponseWriter, sr protocol.SignedRequest, body []byte) {
	var req protocol.ResultsRequest
	if sr.Run != "" || sr.Attempt != "" || sr.Lease != "" || json.Unmarshal(body, &req) != nil ||
		len(req.Results) == 0 || len(req.Results) > protocol.MaxResultsBatch {
		problem(w, 400, protocol.CodeBadRequest)
		return
	}
	ids := make([]string, len(req.Results))
	for i, it := range req.Results {
		if it.Outcome != "succeeded" && it.Outcome != "failed" || slices.Contains(ids[:i], it.AttemptID) {
			problem(w, 400, protocol.CodeBadRequest)
			return
		}
		ids[i] = it.AttemptID
	}
	s.holdResultCall(ids)
	resp := protocol.ResultsResponse{Results: make([]protocol.ResultAnswer, len(req.Results))}
	for i, it := range req.Results {
		resp.Results[i].AttemptID = it.AttemptID
		a := s.leased[it.AttemptID]
		if a == nil || a.RunID != it.RunID || a.Lease.Token != it.LeaseToken {
			resp.Results[i].Error = &protocol.Problem{Type: "about:blank", Status: 409, Code: protocol.CodeAttemptStale}
			continue
		}
		s.record(it.AttemptID, it.ResultRequest)
		resp.Results[i].RunState = it.Outcome
	}
	reply(w, 200, resp)
}

// waitFor polls cond under the server's lock until it holds or the test's
// patience ends.
func (s *fakeServer) waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-s.changed:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// claimBatch answers a claim with max; s.mu is held.
func (s *fakeServer) claimBatch(w http.ResponseWriter, req protocol.ClaimRequest) {
	if req.Max > protocol.MaxClaimBatch {
		problem(w, 400, protocol.CodeBadRequest)
		return
	}
	got := s.byBatch[req.RequestID]
	for got == nil && len(s.queue) > 0 && len(got) < req.Max {
		var a *protocol.Assignment
		a, s.queue = s.queue[0], s.queue[1:]
		a.Lease.Token = id.Secret(24)
		s.leased[a.AttemptID] = a
		got = append(got, a)
	}
	if len(got) == 0 {
		s.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		s.mu.Lock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if req.RequestID != "" {
		if s.byBatch == nil {
			s.byBatch = map[string][]*protocol.Assignment{}
		}
		s.byBatch[req.RequestID] = got
	}
	if s.loseClaimAnswers > 0 {
		s.loseClaimAnswers--
		problem(w, 503, protocol.CodeRetry)
		return
	}
	reply(w, 200, protocol.ClaimBatch{Assignments: got})
}
