package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jobplane/jobplane/internal/crosstenant"
	"github.com/jobplane/jobplane/internal/failpoint"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// MaxClaimWait bounds a claim's long poll.
const MaxClaimWait = 30 * time.Second

// Heartbeat reports which of the runner's attempts it must stop: those no
// longer leased to it and those whose run was cancelled.
func (s *Service) Heartbeat(ctx context.Context, call *principal.RunnerCall, req *protocol.HeartbeatRequest) (*protocol.HeartbeatResponse, error) {
	if req.Status != "idle" && req.Status != "busy" && req.Status != "" {
		return nil, fmt.Errorf("status must be idle or busy: %w", protocol.ErrBadRequest)
	}
	if len(req.Attempts) > 1000 {
		return nil, fmt.Errorf("too many attempts: %w", protocol.ErrBadRequest)
	}
	executor, caps, err := store.RunnerCapabilities(req.Executor, req.Capabilities)
	if err != nil {
		return nil, err
	}
	if err := s.restate(ctx, call, executor, caps); err != nil {
		return nil, err
	}
	s.runnerSeen(call.Runner)
	now, err := s.store.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return nil, store.Refusal(err)
	}
	resp := &protocol.HeartbeatResponse{ServerTime: now.UTC(), Status: call.Runner.Status, CancelAttempts: []string{}}
	for _, aid := range req.Attempts {
		a, err := s.store.AttemptGetByID(ctx, aid, false)
		if errors.Is(err, store.ErrNotFound) {
			crosstenant.Note(ctx, call.Runner.Tenant, "attempt", crosstenant.Probe(ctx, s.store, "attempt", aid))
			resp.CancelAttempts = append(resp.CancelAttempts, aid)
			continue
		}
		if err != nil {
			return nil, store.Refusal(err)
		}
		if a.RunnerID != call.Runner.ID || a.State != store.AttemptLeased || !now.Before(*a.LeaseExpiresAt) {
			crosstenant.Note(ctx, call.Runner.Tenant, "attempt", a.Tenant)
			resp.CancelAttempts = append(resp.CancelAttempts, aid)
			continue
		}
		r, err := s.store.RunGetByID(ctx, a.RunID, false)
		if err != nil {
			return nil, store.Refusal(err)
		}
		if r.CancelRequested {
			resp.CancelAttempts = append(resp.CancelAttempts, aid)
		}
	}
	return resp, nil
}

// Claim leases the oldest eligible attempt to the runner, waiting up to
// wait for one to appear. It returns nil when nothing became eligible. A
// request that sets max is answered by ClaimBatch.
func (s *Service) Claim(ctx context.Context, call *principal.RunnerCall, req *protocol.ClaimRequest) (*protocol.Assignment, error) {
	asgs, err := s.claim(ctx, call, req, 1)
	if len(asgs) == 0 {
		return nil, err
	}
	return asgs[0], err
}

// ClaimBatch is Claim for up to req.Max attempts at once (1..MaxClaimBatch):
// one signed request, one long poll and one group transaction hand a runner
// with free capacity several attempts, each with its own lease. It returns
// as soon as at least one was claimed.
func (s *Service) ClaimBatch(ctx context.Context, call *principal.RunnerCall, req *protocol.ClaimRequest) ([]*protocol.Assignment, error) {
	if req.Max < 1 || req.Max > protocol.MaxClaimBatch {
		return nil, fmt.Errorf("max must be 1..%d: %w", protocol.MaxClaimBatch, protocol.ErrBadRequest)
	}
	return s.claim(ctx, call, req, req.Max)
}

func (s *Service) claim(ctx context.Context, call *principal.RunnerCall, req *protocol.ClaimRequest, n int) ([]*protocol.Assignment, error) {
	if req.WaitSeconds < 0 || time.Duration(req.WaitSeconds)*time.Second > MaxClaimWait {
		return nil, fmt.Errorf("wait_seconds must be 0..30: %w", protocol.ErrBadRequest)
	}
	if len(req.RequestID) > 200 {
		return nil, fmt.Errorf("request_id too long: %w", protocol.ErrBadRequest)
	}
	if call.Runner.Pool == store.ActionsPool {
		// A GitHub Actions workflow's credential is for the one attempt
		// its exchange leased to it (docs/github.md).
		return nil, fmt.Errorf("a GitHub Actions attempt credential cannot claim: %w", protocol.ErrForbidden)
	}
	if err := s.refuseWhileDraining(); err != nil {
		return nil, err
	}
	s.runnerSeen(call.Runner)
	bound, err := s.gate(ctx, call.Runner.Tenant)
	if err != nil {
		return nil, err
	}
	if req.RequestID != "" {
		if a, err := s.reclaim(ctx, call, req.RequestID, n); len(a) > 0 || err != nil {
			return a, err
		}
	}
	// The wait is real time on purpose: it bounds an HTTP request, it is not
	// lease logic.
	timer := time.NewTimer(time.Duration(req.WaitSeconds) * time.Second)
	defer timer.Stop()
	// Runners of other capabilities wait in lines of their own: the head
	// of a line must be able to take whatever wakes it.
	scope := (&store.AttemptClaimParams{Tenant: call.Runner.Tenant, Pool: call.Runner.Pool, RunnerLabels: call.Runner.Labels,
		SelfHosted: call.Runner.SelfHosted, AllowedRepos: call.Runner.AllowedRepos, Capabilities: call.Runner.Capabilities}).Scope()
	w := s.lines.Join(scope)
	defer s.lines.Leave(scope, w)
	for {
		wake := s.store.Wake()
		s.lines.SetTrying(w, true)
		a, err := s.claimOnce(ctx, call, req.RequestID, n, bound)
		s.lines.SetTrying(w, false)
		if errors.Is(err, errRestated) {
			// This call's capabilities are stale, and so is its claim line:
			// the runner's next claim waits with the current ones.
			return nil, nil
		}
		if len(a) == 0 && ctx.Err() != nil {
			// The caller left while its claim waited for a group
			// transaction: nothing was claimed for it.
			return nil, nil
		}
		if len(a) > 0 {
			// There may be more: let the next in line look too (package claimline).
			s.lines.PokeNext(scope, 2)
		}
		if len(a) > 0 || err != nil || req.WaitSeconds == 0 {
			return a, err
		}
		var tickC <-chan time.Time
		var storeWake <-chan struct{}
		var tick *time.Timer
		if s.lines.IsHead(scope, w) {
			// Retries become due with time, not with a notification: the
			// head looks again at least every second.
			storeWake = wake
			tick = time.NewTimer(time.Second)
			tickC = tick.C
		}
		expired := false
		select {
		case <-ctx.Done():
			expired = true
		case <-timer.C:
			expired = true
		case <-storeWake:
		case <-tickC:
		case <-w.Poked():
		case <-s.drain.c():
			// The server is stopping: an idle long-poll must not hold it.
			expired = true
		}
		if tick != nil {
			tick.Stop()
		}
		if expired {
			return nil, nil
		}
	}
}

// slotRequestID is the claim request ID recorded on the i-th attempt of a
// claim: the request's own for the first, so that a claim of one is what it
// always was, and a suffixed one for the others, so that a repeated batch
// finds them all (reclaim).
func slotRequestID(requestID string, i int) string {
	if requestID == "" || i == 0 {
		return requestID
	}
	return requestID + "#" + strconv.Itoa(i)
}

// claimOnce claims up to n attempts. A claimed attempt whose permission
// was revoked since the request ends its run denied (recheck), one whose
// lease keys are held waits for them (acquireKeys); that is committed
// first, with what was claimed before it, and when that was nothing the
// next eligible attempt is tried in a new transaction — so that the locks
// taken for the refused attempt are not held while claiming the next.
func (s *Service) claimOnce(ctx context.Context, call *principal.RunnerCall, requestID string, n int, bound bool) ([]*protocol.Assignment, error) {
	for {
		asgs, revoked, err := s.claimTx(ctx, call, requestID, n, bound)
		if err != nil || !revoked || len(asgs) > 0 {
			return asgs, err
		}
	}
}

// claimTx claims up to n attempts in one group transaction. One at a time
// it stops at the first that is not handed out (revoked); a claim of
// several takes them in one statement and hands out each that may go, and
// reports revoked when one may not. bound says the runner's tenant
// is an installation's (Tenants.Gate): its status is read again inside the claim
// transaction, so that a claim long-polling across a suspension (or a
// deletion) hands out nothing of that tenant.
func (s *Service) claimTx(ctx context.Context, call *principal.RunnerCall, requestID string, n int, bound bool) ([]*protocol.Assignment, bool, error) {
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = id.Secret(32)
	}
	var claimed []claimedAttempt
	revoked := false
	err := s.grouped.InTxNonce(ctx, call.Nonce, func(tx store.Tx) error {
		claimed, revoked = claimed[:0], false
		if n > 1 {
			// One statement claims them all; each is then handed out or
			// not on its own, and none stays claimed without either.
			slots := make([]store.ClaimSlot, n)
			for i := range slots {
				slots[i] = store.ClaimSlot{LeaseDigest: protocol.SHA256Hex([]byte(tokens[i])), ClaimRequestID: slotRequestID(requestID, i)}
			}
			cs, err := tx.AttemptClaimRuns(ctx, s.claimParams(call, "", ""), slots)
			if err != nil {
				return err
			}
			keys := make([][]store.LeaseKey, len(cs))
			for i, c := range cs {
				if keys[i], err = lease.RunKeys(c.Run); err != nil {
					return err
				}
			}
			if err := s.leases.LockKeysFirst(ctx, tx, call.Runner.Tenant, keys); err != nil {
				return err
			}
			w, cats := newRunWrites(tx), catalogMemo{}
			for _, c := range cs {
				got, err := s.handOut(ctx, tx, w, cats, call, c.Attempt, c.Run, tokens[c.Slot], bound)
				if errors.Is(err, errRevoked) {
					revoked = true
					continue
				}
				if err != nil {
					return err
				}
				claimed = append(claimed, *got)
			}
			if err := w.flush(ctx); err != nil {
				return err
			}
			if len(claimed) == 0 {
				return nil
			}
			return failpoint.Inject("claim.beforeCommit")
		}
		for len(claimed) < n {
			slot := len(claimed)
			c, err := s.claimIn(ctx, tx, call, tokens[slot], slotRequestID(requestID, slot), bound)
			if errors.Is(err, errRevoked) {
				revoked = true
				break
			}
			if err != nil {
				return err
			}
			if c == nil {
				break
			}
			claimed = append(claimed, *c)
		}
		if len(claimed) == 0 {
			return nil
		}
		return failpoint.Inject("claim.beforeCommit")
	})
	if err != nil {
		return nil, false, store.Refusal(err)
	}
	if len(claimed) == 0 {
		return nil, revoked, nil
	}
	if err := failpoint.Inject("claim.afterCommitBeforeReply"); err != nil {
		return nil, false, err
	}
	// The assignments (their run tokens signed) are built after the commit,
	// outside the transaction other calls wait behind. Should one fail, the
	// attempts are this runner's already: the runner's retry with the same
	// request ID gets them through reclaim, or their leases run out.
	asgs := make([]*protocol.Assignment, len(claimed))
	for i, c := range claimed {
		asg, err := s.assignment(c.run, c.attempt, c.token)
		if err != nil {
			return nil, false, err
		}
		asg.Leases = lease.FencedKeys(c.held)
		asgs[i] = asg
		s.observeClaim(c.attempt)
		s.log.InfoContext(ctx, "control: attempt claimed", "run_id", asg.RunID, "attempt_id", asg.AttemptID, "runner_id", call.Runner.ID)
	}
	return asgs, revoked, nil
}

// claimedAttempt is what a claim's transaction hands out, made into an
// assignment once it committed.
type claimedAttempt struct {
	run     *store.Run
	attempt *store.Attempt
	held    []store.LeaseHold
	token   string
}

// errRevoked: the attempt claimed was not handed out (denied at dispatch,
// its repository no longer granted, or blocked on a lease key); its new
// state is part of the transaction.
var errRevoked = errors.New("claimed attempt not handed out")

// errRestated: the runner's stated capabilities no longer cover an attempt
// its claim picked (see handOut); the claim's transaction rolls back and
// the claim is answered with nothing.
var errRestated = errors.New("the runner's capabilities changed while it claimed")

// claimParams are the runner's claim parameters, with one attempt's lease
// digest and claim request ID.
func (s *Service) claimParams(call *principal.RunnerCall, digest, requestID string) *store.AttemptClaimParams {
	return &store.AttemptClaimParams{
		Tenant: call.Runner.Tenant, Pool: call.Runner.Pool, RunnerLabels: call.Runner.Labels,
		RunnerID: call.Runner.ID, LeaseDigest: digest, SelfHosted: call.Runner.SelfHosted, AllowedRepos: call.Runner.AllowedRepos,
		Capabilities: call.Runner.Capabilities, ClaimRequestID: requestID, Now: s.clock.NowOrNil(),
	}
}

// claimIn claims one attempt in tx: nil when none is eligible.
func (s *Service) claimIn(ctx context.Context, tx store.Tx, call *principal.RunnerCall, token, requestID string, bound bool) (*claimedAttempt, error) {
	a, r, err := tx.AttemptClaimRun(ctx, s.claimParams(call, protocol.SHA256Hex([]byte(token)), requestID))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.handOut(ctx, tx, writeNow{tx}, nil, call, a, r, token, bound)
}

// handOut decides, in tx, whether an attempt just claimed goes to the
// runner: errRevoked when it does not (denied at dispatch, its repository
// no longer granted (withdrawn.go), or blocked on a lease key), its new state then being part of tx. The update of a run
// handed out goes through w.
func (s *Service) handOut(ctx context.Context, tx store.Tx, w runWriter, cats catalogMemo, call *principal.RunnerCall, a *store.Attempt, r *store.Run, token string, bound bool) (*claimedAttempt, error) {
	rn, err := runnerClaimable(ctx, tx, call.Runner.ID)
	if err != nil {
		return nil, err
	}
	if rn.Pool != store.ActionsPool && !rn.Capabilities.Has(a.Needs) {
		// The claim picked the attempt with the capabilities the runner
		// stated when it authenticated; a heartbeat has since stated
		// fewer (a worker restarted with another executor). The claim is
		// rolled back and answered empty: the runner's next claim is
		// matched against what it can run now. A one-attempt runner of
		// the GitHub Actions mode states nothing: its attempt was
		// dispatched to it (HandOut), not picked by what it can do.
		return nil, errRestated
	}
	if bound {
		// Only after an attempt was found: an idle long-poll costs
		// nothing more. The refusal rolls the claim back.
		if err := s.tenants.GateTx(ctx, tx, call.Runner.Tenant); err != nil {
			return nil, err
		}
	}
	if reason, err := s.repoWithdrawn(ctx, tx, r.Tenant, a.Repo, bound); err != nil || reason != "" {
		if err == nil {
			err = s.endWithdrawn(ctx, tx, w, r, a, reason)
		}
		if err == nil {
			err = errRevoked
		}
		return nil, err
	}
	ok, err := s.recheck(ctx, tx, cats, r, a, bound)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errRevoked
	}
	waited := r.WaitingFor
	held, blocked, err := s.leases.Acquire(ctx, tx, r, a)
	if err != nil {
		return nil, err
	}
	if blocked {
		if r.WaitingFor != waited {
			// The Check Run says which key it now waits for.
			if err := s.runChanged(ctx, tx, r, ""); err != nil {
				return nil, err
			}
		}
		return nil, errRevoked // try the next eligible attempt
	}
	if r.State == store.RunQueued {
		r.State = store.RunRunning
		r.UpdatedAt = *a.ClaimedAt
	}
	if err := w.runUpdate(ctx, r); err != nil {
		return nil, err
	}
	if err := s.runChanged(ctx, tx, r, ""); err != nil {
		return nil, err
	}
	if err := s.audit(ctx, tx, r.Tenant, "runner:"+call.Runner.ID, "attempt.claimed", r.ID, claimedDetails{Attempt: a.ID, Number: a.Number, Runner: call.Runner.ID, LeaseExpiresAt: a.LeaseExpiresAt, Holder: lease.Holder(a)}); err != nil {
		return nil, err
	}
	return &claimedAttempt{run: r, attempt: a, held: held, token: token}, nil
}

// runnerClaimable refuses, in the claim's transaction, a runner disabled
// since its request was authenticated: a claim long-polls for up to
// MaxClaimWait, and a runner disabled meanwhile must not be handed the
// attempt that wakes it. The runner's row is locked, so a concurrent
// disable either commits first (and is seen here) or waits for this claim
// and then expires what it handed out. Only after an attempt was found: an
// idle long-poll costs nothing more, and the refusal rolls the claim back.
func runnerClaimable(ctx context.Context, tx store.Tx, runnerID string) (*store.Runner, error) {
	rn, err := tx.RunnerGetByID(ctx, runnerID, true)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("runner %s is no longer registered: %w", runnerID, protocol.ErrRunnerDisabled)
	}
	if err != nil {
		return nil, err
	}
	if rn.Status != store.RunnerActive {
		return nil, fmt.Errorf("runner %s is disabled: %w", runnerID, protocol.ErrRunnerDisabled)
	}
	return rn, nil
}

// reclaim answers a repeated claim request: while the leases it produced are
// alive, the runner gets the same attempts again. The lease tokens are
// rotated because only their digests are stored; the lost answer's tokens
// were never seen. The attempts of a batch are claimed in slot order, so
// when the first slot's request ID is unknown nothing was claimed.
func (s *Service) reclaim(ctx context.Context, call *principal.RunnerCall, requestID string, n int) ([]*protocol.Assignment, error) {
	var asgs []*protocol.Assignment
	err := s.store.InTxNonce(ctx, call.Nonce, func(tx store.Tx) error {
		asgs = nil
		for i := range n {
			asg, err := s.reclaimIn(ctx, tx, call, slotRequestID(requestID, i))
			if errors.Is(err, store.ErrNotFound) {
				if i == 0 {
					return nil
				}
				continue
			}
			if err != nil {
				return err
			}
			if asg != nil {
				asgs = append(asgs, asg)
			}
		}
		return nil
	})
	return asgs, store.Refusal(err)
}

// reclaimIn hands out again the attempt claimed under requestID, if its
// lease lives: store.ErrNotFound when there is no such attempt, nil when
// its lease ended.
func (s *Service) reclaimIn(ctx context.Context, tx store.Tx, call *principal.RunnerCall, requestID string) (*protocol.Assignment, error) {
	token := id.Secret(32)
	a, err := tx.AttemptGetByClaimRequest(ctx, call.Runner.ID, requestID)
	if err != nil {
		return nil, err
	}
	a, err = tx.AttemptGetByID(ctx, a.ID, true)
	if err != nil {
		return nil, err
	}
	now, err := tx.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return nil, err
	}
	if a.State != store.AttemptLeased || a.RunnerID != call.Runner.ID || !now.Before(*a.LeaseExpiresAt) {
		return nil, nil
	}
	a.LeaseDigest = protocol.SHA256Hex([]byte(token))
	if err := tx.AttemptUpdate(ctx, a); err != nil {
		return nil, err
	}
	r, err := tx.RunGetByID(ctx, a.RunID, false)
	if err != nil {
		return nil, err
	}
	asg, err := s.assignment(r, a, token)
	if err != nil {
		return nil, err
	}
	holds, err := tx.LeaseList(ctx, r.Tenant, "")
	if err != nil {
		return nil, err
	}
	var mine []store.LeaseHold
	for _, h := range holds {
		if h.AttemptID == a.ID {
			mine = append(mine, h)
		}
	}
	asg.Leases = lease.FencedKeys(mine)
	return asg, nil
}

func (s *Service) assignment(r *store.Run, a *store.Attempt, token string) (*protocol.Assignment, error) {
	spec, err := s.specs.get(r)
	if err != nil {
		return nil, fmt.Errorf("decode pinned spec of run %s: %w", r.ID, err)
	}
	env := spec.Env
	if env == nil {
		env = map[string]string{}
	}
	var tok *protocol.RunToken
	if s.creds != nil {
		var grants map[string]string
		if len(r.Grants) > 0 {
			if err := json.Unmarshal(r.Grants, &grants); err != nil {
				return nil, fmt.Errorf("decode grants of run %s: %w", r.ID, err)
			}
		}
		if tok, err = s.creds.Mint(r, a, grants); err != nil {
			return nil, err
		}
	}
	return &protocol.Assignment{
		RunToken: tok,
		RunID:    r.ID, AttemptID: a.ID, AttemptNumber: a.Number,
		Lease: protocol.Lease{
			Token: token, ExpiresAt: a.LeaseExpiresAt.UTC(), Deadline: a.Deadline.UTC(),
			TTLSeconds: int(a.LeaseTTL / time.Second),
		},
		Tenant: a.Tenant,
		Job: protocol.AssignedJob{
			Name: r.Job, Channel: r.Channel, Commit: r.Commit, Command: spec.Command, Env: env,
			TimeoutSeconds: int(a.Timeout / time.Second),
			Image:          spec.Image, Resources: spec.claimResources(), Network: spec.Network, Workdir: spec.Workdir,
		},
		Params:     r.Params,
		Connectors: slices.Sorted(maps.Keys(spec.Connectors)),
		Leases:     []protocol.FencedKey{},
		Artifacts:  spec.claimArtifacts(), Source: spec.claimSource(),
	}, nil
}

// errEnded marks an attempt that already ended, for the result's idempotency.
var errEnded = errors.New("attempt ended")

// checkAttempt locks and returns the attempt a signed call names, refusing
// anything that is not this runner's live lease. On an attempt that already
// ended it returns the attempt and errEnded.
func (s *Service) checkAttempt(ctx context.Context, tx store.Tx, call *principal.RunnerCall) (*store.Attempt, *store.Run, time.Time, error) {
	return s.checkAttemptRun(ctx, tx, call, true)
}

// checkAttemptRun is checkAttempt; without withRun, a live attempt's run is
// neither read nor locked (nil), for calls that only touch the attempt (a
// log chunk).
func (s *Service) checkAttemptRun(ctx context.Context, tx store.Tx, call *principal.RunnerCall, withRun bool) (*store.Attempt, *store.Run, time.Time, error) {
	var zero time.Time
	if call.Run == "" || call.Attempt == "" || call.Lease == "" {
		return nil, nil, zero, fmt.Errorf("the request names no attempt (Jobplane-Run, Jobplane-Attempt and Jobplane-Lease are required): %w", protocol.ErrAttemptStale)
	}
	// One statement reads the attempt, with withRun its run, and the clock.
	// Renewals and log chunks leave the run unlocked: they do not change it.
	a, r, now, err := tx.AttemptForCall(ctx, call.Attempt, withRun, s.clock.NowOrNil())
	return s.checkFound(ctx, tx, call, a, r, now, err)
}

// checkFound is checkAttemptRun's verdict on the attempt it read (a, with
// its run r or nil, at now; err from the read).
func (s *Service) checkFound(ctx context.Context, tx store.Tx, call *principal.RunnerCall, a *store.Attempt, r *store.Run, now time.Time, err error) (*store.Attempt, *store.Run, time.Time, error) {
	var zero time.Time
	stale := func() error {
		return fmt.Errorf("attempt %s is not a current lease of this runner: %w", call.Attempt, protocol.ErrAttemptStale)
	}
	if errors.Is(err, store.ErrNotFound) {
		a, err = nil, nil
	}
	if err != nil {
		return nil, nil, zero, err
	}
	if a == nil || a.RunID != call.Run || a.RunnerID != call.Runner.ID || a.Tenant != call.Runner.Tenant ||
		!digestEqual(a.LeaseDigest, protocol.SHA256Hex([]byte(call.Lease))) {
		crosstenant.RefusedAttempt(ctx, tx, call, a) // MT2 audit, same answer
		return nil, nil, zero, stale()
	}
	switch a.State {
	case store.AttemptLeased:
		if !now.Before(*a.LeaseExpiresAt) {
			return nil, nil, zero, fmt.Errorf("lease of attempt %s expired at %s: %w", a.ID, a.LeaseExpiresAt.UTC().Format(time.RFC3339), protocol.ErrLeaseExpired)
		}
	case store.AttemptExpired:
		return nil, nil, zero, fmt.Errorf("lease of attempt %s expired at %s: %w", a.ID, a.LeaseExpiresAt.UTC().Format(time.RFC3339), protocol.ErrLeaseExpired)
	case store.AttemptSucceeded, store.AttemptFailed:
		if r == nil {
			if r, err = tx.RunGetByID(ctx, a.RunID, false); err != nil {
				return nil, nil, zero, err
			}
		}
		return a, r, now, errEnded
	default:
		return nil, nil, zero, stale()
	}
	return a, r, now, nil
}

// Renew extends the attempt's lease by its TTL, never past its deadline.
func (s *Service) Renew(ctx context.Context, call *principal.RunnerCall) (*protocol.RenewResponse, error) {
	var resp *protocol.RenewResponse
	err := s.grouped.InTxNonce(ctx, call.Nonce, func(tx store.Tx) error {
		a, r, _, err := s.checkAttempt(ctx, tx, call)
		if errors.Is(err, errEnded) {
			return fmt.Errorf("attempt %s already ended: %w", a.ID, protocol.ErrAttemptStale)
		}
		if err != nil {
			return err
		}
		a, err = tx.AttemptRenew(ctx, &store.AttemptRenewParams{ID: a.ID, LeaseDigest: a.LeaseDigest, Now: s.clock.NowOrNil()})
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("lease of attempt %s expired: %w", call.Attempt, protocol.ErrLeaseExpired)
		}
		if err != nil {
			return err
		}
		resp = &protocol.RenewResponse{ExpiresAt: a.LeaseExpiresAt.UTC(), CancelRequested: r.CancelRequested}
		return nil
	})
	return resp, store.Refusal(err)
}

// MaxLogLines bounds one log chunk.
const MaxLogLines = 5000

// AppendLogs stores a chunk of the attempt's output; a repeated seq is ignored.
func (s *Service) AppendLogs(ctx context.Context, call *principal.RunnerCall, req *protocol.LogsRequest) error {
	lines, err := logChunk(req, "")
	if err != nil {
		return err
	}
	return store.Refusal(s.grouped.InTxNonce(ctx, call.Nonce, func(tx store.Tx) error {
		a, _, now, err := s.checkAttemptRun(ctx, tx, call, false)
		if errors.Is(err, errEnded) {
			return fmt.Errorf("attempt %s already ended: %w", a.ID, protocol.ErrAttemptStale)
		}
		if err != nil {
			return err
		}
		return appendChunk(ctx, tx, writeNow{tx}, a, req.Seq, lines, now)
	}))
}

// logChunk checks a log chunk (at field prefix, "logs." in a result) and
// returns its lines to store.
func logChunk(req *protocol.LogsRequest, prefix string) ([]store.LogLine, error) {
	if len(req.Lines) > MaxLogLines {
		return nil, &protocol.FieldError{Field: prefix + "lines", Err: fmt.Errorf("more than %d lines in one chunk: %w", MaxLogLines, protocol.ErrBadRequest)}
	}
	if req.Seq < 0 {
		return nil, &protocol.FieldError{Field: prefix + "seq", Err: fmt.Errorf("%sseq must not be negative: %w", prefix, protocol.ErrBadRequest)}
	}
	lines := make([]store.LogLine, 0, len(req.Lines))
	for i, l := range req.Lines {
		switch l.Stream {
		case "stdout", "stderr", "system":
		default:
			f := fmt.Sprintf("%slines[%d].stream", prefix, i)
			return nil, &protocol.FieldError{Field: f, Err: fmt.Errorf("%s must be stdout, stderr or system: %w", f, protocol.ErrBadRequest)}
		}
		lines = append(lines, store.LogLine{At: l.At.UTC(), Stream: l.Stream, Text: protocol.StorableText(l.Text)})
	}
	return lines, nil
}

// appendChunk stores a checked chunk of a live attempt's output through
// w; a repeated seq is ignored.
func appendChunk(ctx context.Context, tx store.Tx, w runWriter, a *store.Attempt, seq int64, lines []store.LogLine, now time.Time) error {
	for i := range lines {
		if lines[i].At.IsZero() {
			lines[i].At = now
		}
	}
	if err := w.logAppend(ctx, &store.LogAppendParams{RunID: a.RunID, AttemptID: a.ID, Seq: seq, Lines: lines}); err != nil {
		return err
	}
	// Log followers wait on the wake-up channel; a chunk makes no work
	// claimable, so other replicas are not notified (their followers poll).
	return tx.WakeWatchers(ctx)
}

// Relinquish gives an attempt back: it ends relinquished and the run gets a
// fresh attempt that does not count as a retry.
func (s *Service) Relinquish(ctx context.Context, call *principal.RunnerCall, req *protocol.RelinquishRequest) error {
	if len(req.Reason) > 1000 {
		return fmt.Errorf("reason too long: %w", protocol.ErrBadRequest)
	}
	return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
		a, r, now, err := s.checkAttempt(ctx, tx, call)
		if errors.Is(err, errEnded) {
			return fmt.Errorf("attempt %s already ended: %w", a.ID, protocol.ErrAttemptStale)
		}
		if err != nil {
			return err
		}
		return s.endAttempt(ctx, tx, writeNow{tx}, r, a, store.AttemptRelinquished, nil, now, "runner:"+call.Runner.ID, req.Reason)
	}))
}

type resultRecord struct {
	Outcome   string   `json:"outcome"`
	ExitCode  int      `json:"exit_code"`
	Summary   string   `json:"summary"`
	Artifacts []string `json:"artifacts"`
	RequestID string   `json:"request_id,omitempty"`
}

func (a resultRecord) same(b resultRecord) bool {
	return a.Outcome == b.Outcome && a.ExitCode == b.ExitCode && a.Summary == b.Summary && slices.Equal(a.Artifacts, b.Artifacts)
}

// Result records an attempt's terminal outcome. The same result again is
// acknowledged; a different one is a conflict.
func (s *Service) Result(ctx context.Context, call *principal.RunnerCall, req *protocol.ResultRequest) (*protocol.ResultResponse, error) {
	in, err := prepareResult(req)
	if err != nil {
		return nil, err
	}
	var resp *protocol.ResultResponse
	err = s.grouped.InTxNonce(ctx, call.Nonce, func(tx store.Tx) error {
		a, r, now, ack, err := s.resultCheck(ctx, tx, call, in, nil)
		if err != nil {
			return err
		}
		if ack != nil {
			resp = ack
			return nil
		}
		if resp, err = s.resultWrite(ctx, tx, writeNow{tx}, call, in, a, r, now); err != nil {
			return err
		}
		return failpoint.Inject("result.beforeCommit")
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	if err := failpoint.Inject("result.afterCommitBeforeReply"); err != nil {
		return nil, err
	}
	return resp, nil
}

// ResultOutcome is one item's outcome in Results: the run's state, or the
// refusal of that item alone.
type ResultOutcome struct {
	AttemptID string
	RunState  string
	Err       error
}

// Results records the results of several of the runner's attempts in one
// transaction, each item as Result would record it alone. An item that
// Result would refuse (a stale or expired lease, a conflicting result,
// artifacts not its own) is refused on its own and the others are
// recorded; an invalid item refuses the whole call, and nothing is
// recorded. The items name their attempts: the call itself names none.
func (s *Service) Results(ctx context.Context, call *principal.RunnerCall, req *protocol.ResultsRequest) ([]ResultOutcome, error) {
	ins, calls, err := prepareResults(call, req)
	if err != nil {
		return nil, err
	}
	out := make([]ResultOutcome, len(req.Results))
	type checked struct {
		a   *store.Attempt
		r   *store.Run
		now time.Time
	}
	err = s.grouped.InTxNonce(ctx, call.Nonce, func(tx store.Tx) error {
		// Every item is checked (its rows locked) before any is written,
		// so that the lease keys of all of them can be locked in order
		// first (keyorder.go). The items are distinct attempts, and a run
		// has one live attempt: an item's check does not depend on
		// another's write, except for the run state an acknowledged
		// repeat answers, which is set below as the items before it left
		// the run.
		ids := make([]string, len(calls))
		for i, c := range calls {
			ids[i] = c.Attempt
		}
		found, err := tx.AttemptsForCall(ctx, ids, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		byID := make(map[string]*store.CallRows, len(found))
		for i := range found {
			byID[found[i].Attempt.ID] = &found[i]
		}
		checks := make([]*checked, len(ins))
		var keys [][]store.LeaseKey
		for i, in := range ins {
			out[i] = ResultOutcome{AttemptID: calls[i].Attempt}
			a, r, now, ack, err := s.resultCheck(ctx, tx, calls[i], in, byID)
			switch {
			case protocol.IsRefusal(err):
				// The checks only read: refusing this item leaves the
				// transaction as it was.
				out[i].Err = err
				continue
			case err != nil:
				return err
			case ack != nil:
				out[i].RunState = ack.RunState
				continue
			}
			ks, err := lease.RunKeys(r)
			if err != nil {
				return err
			}
			checks[i], keys = &checked{a: a, r: r, now: now}, append(keys, ks)
		}
		if err := s.leases.LockKeysFirst(ctx, tx, call.Runner.Tenant, keys); err != nil {
			return err
		}
		written := map[string]string{} // run ID → its state after an item's write
		w := newRunWrites(tx)
		for i, c := range checks {
			if c == nil {
				if st, ok := written[calls[i].Run]; ok && out[i].Err == nil {
					out[i].RunState = st
				}
				continue
			}
			resp, err := s.resultWrite(ctx, tx, w, calls[i], ins[i], c.a, c.r, c.now)
			if err != nil {
				return err
			}
			out[i].RunState = resp.RunState
			written[c.r.ID] = resp.RunState
		}
		return w.flush(ctx)
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	return out, nil
}

// prepareResults checks a results call outside any transaction: each item
// as Result checks its body, and each gets the signed call it would have
// been alone, naming its attempt with its lease token.
func prepareResults(call *principal.RunnerCall, req *protocol.ResultsRequest) ([]*resultInput, []*principal.RunnerCall, error) {
	if call.Run != "" || call.Attempt != "" || call.Lease != "" {
		return nil, nil, fmt.Errorf("a results call names its attempts in its items, not in the Jobplane-Run, Jobplane-Attempt and Jobplane-Lease headers: %w", protocol.ErrBadRequest)
	}
	if len(req.Results) == 0 || len(req.Results) > protocol.MaxResultsBatch {
		return nil, nil, fmt.Errorf("results must hold 1 to %d items, not %d: %w", protocol.MaxResultsBatch, len(req.Results), protocol.ErrBadRequest)
	}
	ins := make([]*resultInput, len(req.Results))
	calls := make([]*principal.RunnerCall, len(req.Results))
	seen := make(map[string]int, len(req.Results))
	for i := range req.Results {
		it := &req.Results[i]
		if it.RunID == "" || it.AttemptID == "" || it.LeaseToken == "" {
			return nil, nil, &protocol.FieldError{Field: fmt.Sprintf("results[%d]", i), Err: fmt.Errorf("results[%d]: run_id, attempt_id and lease_token are required: %w", i, protocol.ErrBadRequest)}
		}
		if j, dup := seen[it.AttemptID]; dup {
			return nil, nil, &protocol.FieldError{Field: fmt.Sprintf("results[%d].attempt_id", i), Err: fmt.Errorf("results[%d]: attempt %s is also results[%d]: %w", i, it.AttemptID, j, protocol.ErrBadRequest)}
		}
		seen[it.AttemptID] = i
		in, err := prepareResult(&it.ResultRequest)
		if err != nil {
			return nil, nil, itemError("results", i, err)
		}
		ins[i] = in
		calls[i] = &principal.RunnerCall{Runner: call.Runner, Run: it.RunID, Attempt: it.AttemptID, Lease: it.LeaseToken, Body: call.Body, Nonce: call.Nonce}
	}
	return ins, calls, nil
}

// resultInput is a result request validated outside any transaction.
type resultInput struct {
	req   *protocol.ResultRequest
	rec   resultRecord
	raw   json.RawMessage
	lines []store.LogLine
	state store.AttemptState
}

func prepareResult(req *protocol.ResultRequest) (*resultInput, error) {
	if req.Outcome != "succeeded" && req.Outcome != "failed" {
		return nil, fmt.Errorf("outcome must be succeeded or failed: %w", protocol.ErrBadRequest)
	}
	if len(req.Summary) > 4096 || len(req.RequestID) > 200 {
		return nil, fmt.Errorf("summary or request_id too long: %w", protocol.ErrBadRequest)
	}
	in := &resultInput{req: req, state: store.AttemptSucceeded}
	if req.Outcome == "failed" {
		in.state = store.AttemptFailed
	}
	req.Summary = protocol.StorableText(req.Summary)
	in.rec = resultRecord{Outcome: req.Outcome, ExitCode: req.ExitCode, Summary: req.Summary, Artifacts: req.Artifacts, RequestID: req.RequestID}
	if in.rec.Artifacts == nil {
		in.rec.Artifacts = []string{}
	}
	if req.Logs != nil {
		var err error
		if in.lines, err = logChunk(req.Logs, "logs."); err != nil {
			return nil, err
		}
	}
	var err error
	if in.raw, err = json.Marshal(in.rec); err != nil {
		return nil, err
	}
	return in, nil
}

// resultCheck locks and checks the attempt a result is for, writing
// nothing. ack is set when the attempt already ended with this same result.
// found, when not nil, holds the attempts a results call read (and locked)
// ahead, with their runs, in one statement for all its items
// (store.AttemptsForCall); an attempt not in it does not exist.
func (s *Service) resultCheck(ctx context.Context, tx store.Tx, call *principal.RunnerCall, in *resultInput, found map[string]*store.CallRows) (a *store.Attempt, r *store.Run, now time.Time, ack *protocol.ResultResponse, err error) {
	switch f := found[call.Attempt]; {
	case found == nil:
		a, r, now, err = s.checkAttempt(ctx, tx, call)
	case f == nil:
		a, r, now, err = s.checkFound(ctx, tx, call, nil, nil, now, store.ErrNotFound)
	default:
		a, r, now, err = s.checkFound(ctx, tx, call, f.Attempt, f.Run, f.Now, nil)
	}
	if errors.Is(err, errEnded) {
		var prev resultRecord
		if json.Unmarshal(a.Result, &prev) != nil || !prev.same(in.rec) {
			return nil, nil, now, nil, fmt.Errorf("attempt %s already ended %s with another result: %w", a.ID, a.State, protocol.ErrResultConflict)
		}
		return nil, nil, now, &protocol.ResultResponse{RunState: string(r.State)}, nil
	}
	if err != nil {
		return nil, nil, now, nil, err
	}
	if err := s.checkResultArtifacts(ctx, tx, a, in.rec.Artifacts); err != nil {
		return nil, nil, now, nil, err
	}
	return a, r, now, nil, nil
}

// resultWrite records a checked result: its log chunk, then the attempt's
// end.
func (s *Service) resultWrite(ctx context.Context, tx store.Tx, w runWriter, call *principal.RunnerCall, in *resultInput, a *store.Attempt, r *store.Run, now time.Time) (*protocol.ResultResponse, error) {
	if in.req.Logs != nil {
		// Before the attempt ends: a log follower that sees the run
		// finished has seen its last lines.
		if err := appendChunk(ctx, tx, w, a, in.req.Logs.Seq, slices.Clone(in.lines), now); err != nil {
			return nil, err
		}
	}
	if err := s.endAttempt(ctx, tx, w, r, a, in.state, in.raw, now, "runner:"+call.Runner.ID, in.req.Summary); err != nil {
		return nil, err
	}
	return &protocol.ResultResponse{RunState: string(r.State)}, nil
}

// endAttempt ends a live attempt and moves its run on: to its end, or to a
// new attempt when the retry policy allows (or the attempt was given back).
// Both rows must be locked by the caller. The update of a run that ends
// goes through w; a next attempt is written to tx at once.
func (s *Service) endAttempt(ctx context.Context, tx store.Tx, w runWriter, r *store.Run, a *store.Attempt, state store.AttemptState, result json.RawMessage, now time.Time, actor, reason string) error {
	a.State = state
	a.EndedAt = &now
	if result != nil {
		a.Result = result
	}
	// The pinned spec is decoded only for a next attempt: most attempts end
	// their run, and this runs on the writer others wait behind.
	nextAttempt := func(notBefore func(Spec) time.Time) (*store.Attempt, error) {
		spec, err := runSpec(r)
		if err != nil {
			return nil, err
		}
		return s.newAttempt(r, spec, a.Number+1, now, notBefore(spec)), nil
	}
	details := endedDetails{Attempt: a.ID, Number: a.Number, State: state, Holder: lease.Holder(a), Reason: reason}
	var next *store.Attempt
	switch {
	case state == store.AttemptSucceeded:
		finish(r, store.RunSucceeded, now)
	case r.CancelRequested || state == store.AttemptCancelled:
		finish(r, store.RunCancelled, now)
	case state == store.AttemptRelinquished:
		var err error
		if next, err = nextAttempt(func(Spec) time.Time { return now }); err != nil {
			return err
		}
	default: // failed or expired
		r.CountedAttempts++
		timedOut := state == store.AttemptExpired && a.Deadline != nil && !now.Before(*a.Deadline)
		if r.CountedAttempts < r.MaxAttempts {
			var err error
			if next, err = nextAttempt(func(sp Spec) time.Time { return now.Add(time.Duration(sp.Backoff)) }); err != nil {
				return err
			}
		} else if timedOut {
			finish(r, store.RunTimedOut, now)
		} else {
			finish(r, store.RunFailed, now)
		}
	}
	if next != nil {
		// The next attempt may only be inserted once this one is no
		// longer live (one live attempt per run).
		if err := tx.AttemptUpdate(ctx, a); err != nil {
			return err
		}
		if err := s.leases.Release(ctx, tx, r, a); err != nil {
			return err
		}
		r.State = store.RunQueued
		r.UpdatedAt = now
		if err := tx.AttemptCreate(ctx, next); err != nil {
			return err
		}
		if err := tx.WakeClaimers(ctx); err != nil {
			return err
		}
		details.NextAttempt = next.ID
		if err := tx.RunUpdate(ctx, r); err != nil {
			return err
		}
	} else {
		// The attempt's row is locked already: its update can wait for
		// the run's, and the two go in one statement. Releasing the keys
		// reads neither row.
		if err := s.leases.Release(ctx, tx, r, a); err != nil {
			return err
		}
		// Log followers learn the run ended. An end that unblocks waiters
		// woke the claimers of every replica in releaseKeys.
		if err := tx.WakeWatchers(ctx); err != nil {
			return err
		}
		if err := w.attemptRunUpdate(ctx, a, r); err != nil {
			return err
		}
	}
	if err := s.runChanged(ctx, tx, r, reason); err != nil {
		return err
	}
	details.RunState = r.State
	return s.audit(ctx, tx, r.Tenant, actor, "attempt."+string(state), r.ID, details)
}

// Reap expires leased attempts whose lease ran out and applies their retry
// policy. It works in bounded batches and re-checks every row under its lock,
// because the list is a snapshot that a result may have overtaken.
func (s *Service) Reap(ctx context.Context) (int, error) {
	ctx = store.WithSystem(ctx, "reaper") // cross-tenant by nature (docs/operations.md)
	expired, err := s.store.AttemptListExpired(ctx, &store.AttemptListExpiredParams{Now: s.clock.NowOrNil(), Limit: s.batch})
	if err != nil {
		return 0, store.Refusal(err)
	}
	if err := failpoint.Inject("rescue.afterSelect"); err != nil {
		return 0, err
	}
	n := 0
	for _, snap := range expired {
		done := false
		err := s.store.InTx(ctx, func(tx store.Tx) error {
			done = false
			a, err := tx.AttemptGetByID(ctx, snap.ID, true)
			if err != nil {
				return err
			}
			now, err := tx.Now(ctx, s.clock.NowOrNil())
			if err != nil {
				return err
			}
			if a.State != store.AttemptLeased || now.Before(*a.LeaseExpiresAt) || a.LeaseDigest != snap.LeaseDigest {
				return nil
			}
			r, err := tx.RunGetByID(ctx, a.RunID, true)
			if err != nil {
				return err
			}
			done = true
			return s.endAttempt(ctx, tx, writeNow{tx}, r, a, store.AttemptExpired, nil, now, "system:reaper", "lease expired")
		})
		if err != nil {
			return n, store.Refusal(err)
		}
		if done {
			n++
			s.log.InfoContext(ctx, "control: lease expired", "attempt_id", snap.ID, "run_id", snap.RunID, "runner_id", snap.RunnerID)
		}
	}
	return n, nil
}
