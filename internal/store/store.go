package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
)

// Sentinel errors. Implementations translate driver errors into these in one place.
var (
	// ErrNotFound: no row matched.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a unique constraint refused the row.
	ErrAlreadyExists = errors.New("already exists")
	// ErrCommitUnknown: the commit's outcome is unknown (the connection broke
	// during COMMIT). Callers answer 503 retry; they must not assume a rollback.
	ErrCommitUnknown = errors.New("commit outcome unknown")
	// ErrUnavailable: the database could not be reached.
	ErrUnavailable = errors.New("store unavailable")
	// ErrContention: InTx kept failing on conflicts with other transactions
	// (deadlocks, serialization failures, a busy SQLite file) and gave up;
	// nothing of the transaction was committed.
	ErrContention = errors.New("transaction conflicted with others, rolled back")
)

// Refusal is err as the refusal a service answers with: a lost commit is
// protocol.ErrRetry (the client repeats its request with the same request
// ID), an unreachable or contended database protocol.ErrUnavailable, a
// replayed nonce protocol.ErrNonceReused. Any other error, a refusal
// included, is err.
func Refusal(err error) error {
	switch {
	case err == nil, errors.As(err, new(*protocol.Error)):
		return err
	case errors.Is(err, ErrReplay):
		return fmt.Errorf("nonce already used: %w", protocol.ErrNonceReused)
	case errors.Is(err, ErrCommitUnknown):
		return fmt.Errorf("%w: %w", protocol.ErrRetry, err)
	case errors.Is(err, ErrContention):
		return fmt.Errorf("%w: %w", protocol.ErrUnavailable, err)
	case errors.Is(err, ErrUnavailable), ConnectionLost(err):
		// The detail stops before the driver's text (problem.Of).
		return fmt.Errorf("the database is unavailable, retry later: %w: %w", protocol.ErrUnavailable, err)
	}
	return err
}

// ConnectionLost reports whether err is the database connection failing
// rather than the statement: a connection refused, reset or closed, a
// backend terminated by an administrator or a server shutting down or
// starting (SQLSTATE class 08, 57P01–57P05, 53300). Nothing of a
// transaction that failed so before its COMMIT was sent is kept, so the
// request is safe to repeat: it is answered 503 with Retry-After, never
// 500. A COMMIT that failed so is ErrCommitUnknown instead (its caller
// knows it sent one). Driver errors are recognized by their methods, so
// that this package needs no driver.
func ConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	var state interface{ SQLState() string }
	if errors.As(err, &state) {
		switch code := state.SQLState(); {
		case strings.HasPrefix(code, "08"), code == "53300":
			return true
		case strings.HasPrefix(code, "57P"):
			return true // admin, crash and idle-session shutdowns, cannot connect now, database dropped
		}
		return false
	}
	var retry interface{ SafeToRetry() bool }
	if errors.As(err, &retry) && retry.SafeToRetry() {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	for _, e := range []error{io.ErrUnexpectedEOF, net.ErrClosed, syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.EPIPE, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// RunState is the state of a run.
type RunState string

// Run states (docs/lifecycle.md).
const (
	RunPendingApproval RunState = "pending_approval"
	RunQueued          RunState = "queued"
	RunRunning         RunState = "running"
	RunSucceeded       RunState = "succeeded"
	RunFailed          RunState = "failed"
	RunCancelled       RunState = "cancelled"
	RunTimedOut        RunState = "timed_out"
	RunDenied          RunState = "denied"
	RunRejected        RunState = "rejected"
	RunExpired         RunState = "expired"
	// RunSuperseded: a newer head of its pull request replaced it.
	RunSuperseded RunState = "superseded"
)

// RunStates are every run state, in lifecycle order.
var RunStates = []RunState{RunPendingApproval, RunQueued, RunRunning, RunSucceeded, RunFailed, RunCancelled, RunTimedOut, RunDenied, RunRejected, RunExpired}

// Terminal reports whether no further transition is possible.
func (s RunState) Terminal() bool {
	switch s {
	case RunPendingApproval, RunQueued, RunRunning:
		return false
	}
	return true
}

// AttemptState is the state of an attempt.
type AttemptState string

// Attempt states.
const (
	AttemptQueued       AttemptState = "queued"
	AttemptLeased       AttemptState = "leased"
	AttemptSucceeded    AttemptState = "succeeded"
	AttemptFailed       AttemptState = "failed"
	AttemptExpired      AttemptState = "expired"
	AttemptCancelled    AttemptState = "cancelled"
	AttemptRelinquished AttemptState = "relinquished"
)

// Terminal reports whether the attempt has ended.
func (s AttemptState) Terminal() bool { return s != AttemptQueued && s != AttemptLeased }

// Tenant is an isolation boundary: an organization or a GitHub installation.
type Tenant struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// Principal is a person or a service that calls the control API.
type Principal struct {
	ID        string
	Tenant    string // tenant ID
	Kind      string // user | service
	Name      string
	Admin     bool
	CreatedAt time.Time
}

// APIToken is a bearer token of a principal; only its digest is stored.
type APIToken struct {
	ID          string
	PrincipalID string
	Digest      string
	ExpiresAt   *time.Time
	RevokedAt   *time.Time
	CreatedAt   time.Time
}

// Run is one requested execution of a job.
type Run struct {
	ID              string
	Tenant          string
	Job             string
	Channel         string
	Ref             string
	Commit          string
	Params          json.RawMessage
	Actor           string
	Reason          string
	Source          json.RawMessage
	IdempotencyKey  string
	State           RunState
	Decision        json.RawMessage
	Grants          json.RawMessage
	LeaseKeys       json.RawMessage
	WaitingFor      string
	Spec            json.RawMessage // the pinned job definition this run executes
	MaxAttempts     int             // attempts that count against retries
	CountedAttempts int             // attempts so far that counted
	CancelRequested bool
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      *time.Time
}

// Attempt is the unit a runner claims.
type Attempt struct {
	ID             string
	RunID          string
	Tenant         string
	Number         int
	State          AttemptState
	Pool           string
	Labels         []string // labels the runner must have
	LeaseTTL       time.Duration
	Timeout        time.Duration
	NotBefore      time.Time // not claimable before (retry backoff)
	RunnerID       string
	LeaseDigest    string
	ClaimRequestID string
	ClaimedAt      *time.Time
	LeaseExpiresAt *time.Time
	Deadline       *time.Time
	HeartbeatAt    *time.Time
	EndedAt        *time.Time
	Result         json.RawMessage
	CreatedAt      time.Time
	// BlockedOn is the lease key a queued attempt waits for; AttemptClaim
	// skips it until a release of that key clears it (no rescans).
	BlockedOn string
	// Repo is the repository the run builds (owner/name, "" when none);
	// a runner with an allow-list claims only attempts of listed ones.
	Repo string
	// ManagedOnly keeps the attempt from self-hosted runners (safe mode).
	ManagedOnly bool
	// Needs is what the runner's executor must be able to do: a runner
	// whose Capabilities lack one of them never claims the attempt.
	Needs Capabilities
}

// Capabilities is a set of what an executor can do (docs/executors.md).
type Capabilities uint8

// The capabilities. The values are stored: never renumber them.
const (
	// CapImages: runs a job's run.image.
	CapImages Capabilities = 1 << iota
	// CapIsolated: the job cannot reach the runner's key, files or
	// processes.
	CapIsolated
)

// Has says whether c has every capability of need.
func (c Capabilities) Has(need Capabilities) bool { return need&^c == 0 }

// String is how the web UI shows c (protocol.Capabilities spells it the
// same way).
func (c Capabilities) String() string {
	s := "not isolated"
	if c.Has(CapIsolated) {
		s = "isolated"
	}
	if c.Has(CapImages) {
		s += ", images"
	}
	return s
}

// ExecutorProcess is the executor of a runner that never named one.
const ExecutorProcess = "process"

// Runner is a registered execution agent.
type Runner struct {
	ID             string
	Tenant         string
	Pool           string
	Name           string
	Labels         []string
	PublicKey      string // base64url Ed25519
	KeyFingerprint string
	Status         string // active | disabled
	SelfHosted     bool
	AllowedRepos   []string
	Version        string
	LastSeenAt     *time.Time
	CreatedAt      time.Time
	// Executor names what runs its jobs (ExecutorProcess when it never
	// said), and Capabilities what that executor can do, as the runner
	// last stated at registration or heartbeat.
	Executor     string
	Capabilities Capabilities
}

// Runner statuses.
const (
	RunnerActive   = "active"
	RunnerDisabled = "disabled"
)

// RegToken is a single-use runner registration token; only its digest is stored.
type RegToken struct {
	Digest       string
	Tenant       string
	Pool         string
	Labels       []string
	AllowedRepos []string
	SelfHosted   bool
	ExpiresAt    time.Time
	UsedAt       *time.Time
	CreatedAt    time.Time
}

// LogLine is one stored line of a run's output.
type LogLine struct {
	ID        int64 // increasing within a run; the cursor of the logs API
	RunID     string
	AttemptID string
	Seq       int64 // the runner's chunk number
	Idx       int   // the line's position in its chunk
	At        time.Time
	Stream    string
	Text      string
}

// AuditEvent records one mutation.
type AuditEvent struct {
	Seq     int64
	Tenant  string
	At      time.Time
	Actor   string
	Action  string
	Subject string
	Details json.RawMessage
	// Hash and PrevHash are the event's chain link, empty until sealed.
	Hash     string
	PrevHash string
}

// Approval is one approver's verdict on a run waiting for approval.
type Approval struct {
	RunID    string
	Approver string
	Verdict  string // approved | rejected
	Comment  string
	At       time.Time
}

// SigningKey is a run-token signing key, sealed with the server key.
type SigningKey struct {
	KID       string
	Sealed    []byte
	CreatedAt time.Time
	RetiredAt *time.Time
}

// Secret is a secret value, encrypted by the server; never returned by any API.
type Secret struct {
	Tenant     string
	Name       string
	Channel    string // "" = every channel
	Ciphertext []byte
	UpdatedAt  time.Time
}

// Credential is something minted for one attempt that must be revoked when
// the attempt ends (a PostgreSQL login role, for instance).
type Credential struct {
	ID        string
	Tenant    string
	RunID     string
	AttemptID string
	Connector string
	Kind      string // the broker that revokes it
	Ref       string // what to revoke (a role name); never a secret
	CreatedAt time.Time
	RevokedAt *time.Time
	// Failures counts revocations that failed; failing credentials are
	// listed after the others so that they cannot starve them.
	Failures int
}

// LeaseKey is one run lease key as rendered for a run at request time and
// kept, as a JSON list, in Run.LeaseKeys.
type LeaseKey struct {
	Key        string `json:"key"`
	Limit      int    `json:"limit"`       // holders at once, >= 1
	OnConflict string `json:"on_conflict"` // queue | reject
	Once       bool   `json:"once,omitempty"`
}

// LeaseHold is one holder of a run lease key (one slot of a semaphore).
type LeaseHold struct {
	Tenant       string
	Key          string
	Slot         int
	RunID        string
	AttemptID    string
	RunnerID     string // of the holding attempt
	FencingToken int64
	AcquiredAt   time.Time
	ExpiresAt    *time.Time // the holding attempt's lease expiry
}

// CallRows is one attempt AttemptsForCall read, with its run and the
// clock at the read.
type CallRows struct {
	Attempt *Attempt
	Run     *Run
	Now     time.Time
}

// AttemptRun is an attempt and its run, for AttemptRunUpdates.
type AttemptRun struct {
	Attempt *Attempt
	Run     *Run
}

// LeaseKeyState is a key's fencing counter and "once" bookkeeping.
type LeaseKeyState struct {
	Tenant           string
	Key              string
	LastFencingToken int64
	ConsumedByRun    string // the run that consumed a once key, or ""
}

// LeaseAcquireParams asks for every key of a run for its attempt.
type LeaseAcquireParams struct {
	Tenant    string
	RunID     string
	AttemptID string
	Keys      []LeaseKey
	Now       *time.Time
}

// Params of the methods.

// AttemptClaimParams selects and leases the oldest eligible queued attempt.
type AttemptClaimParams struct {
	Tenant       string
	Pool         string
	RunnerLabels []string // an attempt is eligible if its labels are a subset
	// SelfHosted runners skip ManagedOnly attempts; a runner with
	// AllowedRepos claims only attempts whose Repo is listed.
	SelfHosted   bool
	AllowedRepos []string
	// Capabilities: an attempt is eligible if it needs none the runner
	// lacks.
	Capabilities   Capabilities
	RunnerID       string
	LeaseDigest    string
	ClaimRequestID string
	Now            *time.Time
}

// Scope names the queue a claim with p sees: runners of one scope could
// take the same attempts. Self-hosted runners and allow-lists see less of
// it (GitHub safe mode, docs/github.md): they are scopes of their own.
func (p *AttemptClaimParams) Scope() string {
	labels := slices.Clone(p.RunnerLabels)
	slices.Sort(labels)
	repos := slices.Clone(p.AllowedRepos)
	slices.Sort(repos)
	return p.Tenant + "\x00" + p.Pool + "\x00" + strings.Join(labels, "\x00") + "\x01" + strconv.FormatBool(p.SelfHosted) +
		"\x01" + strings.Join(repos, "\x00") + "\x01" + strconv.Itoa(int(p.Capabilities))
}

// ClaimSlot is one attempt's share of a claim of several.
type ClaimSlot struct {
	LeaseDigest    string
	ClaimRequestID string
}

// ClaimedRun is an attempt AttemptClaimRuns claimed, its run, and the index
// of the slot it was claimed for.
type ClaimedRun struct {
	Attempt *Attempt
	Run     *Run
	Slot    int
}

// AttemptListExpiredParams lists leased attempts whose lease has run out.
type AttemptListExpiredParams struct {
	Now   *time.Time
	Limit int
}

// AttemptRenewParams extends a live lease by its TTL, never past the deadline.
type AttemptRenewParams struct {
	ID          string
	LeaseDigest string
	Now         *time.Time
}

// AuditListParams pages the audit log: forward from After in sequence
// order, or, with Desc, backward from Before (newest first).
type AuditListParams struct {
	Tenant string
	After  int64
	Before int64     // optional: events with a smaller sequence number
	Desc   bool      // newest first
	RunID  string    // subject filter, optional
	Actor  string    // optional
	Since  time.Time // optional: events at or after
	Limit  int
}

// LogAppendParams stores one chunk of lines; a chunk (attempt, seq) already
// stored is ignored.
type LogAppendParams struct {
	RunID     string
	AttemptID string
	Seq       int64
	Lines     []LogLine // At, Stream, Text
}

// LogListParams reads a run's lines after a cursor.
type LogListParams struct {
	RunID string
	After int64
	Limit int
}

// RunListParams pages runs, newest first.
type RunListParams struct {
	Tenant string
	Job    string
	State  string
	// Channel and Actor filter by equality when set.
	Channel string
	Actor   string
	Before  string // cursor: list runs with ID < Before
	Limit   int
}

// Queries is what both a Store and a Tx can do. Methods are alphabetized.
type Queries interface {
	ActionsQueries
	ArtifactQueries
	AuditQueries
	MetricsQueries
	CatalogQueries
	ScheduleQueries
	GitHubQueries
	RetentionQueries

	// APITokenCreate inserts a token.
	APITokenCreate(ctx context.Context, t *APIToken) error
	// APITokenGetByDigest returns a token and its principal whether or not it
	// is expired or revoked; the caller decides.
	APITokenGetByDigest(ctx context.Context, digest string) (*APIToken, *Principal, error)
	// APITokenRevoke marks a token of one of tenant's principals revoked; a
	// token of another tenant is ErrNotFound.
	APITokenRevoke(ctx context.Context, tenant, id string, now *time.Time) error

	// ApprovalCreate records a verdict; ErrAlreadyExists when this approver
	// already gave one on the run.
	ApprovalCreate(ctx context.Context, a *Approval) error
	// ApprovalListByRun lists a run's verdicts in order.
	ApprovalListByRun(ctx context.Context, runID string) ([]*Approval, error)
	// ApprovalListByRuns lists the verdicts of several runs, each run's in
	// order (one statement for a page of runs).
	ApprovalListByRuns(ctx context.Context, runIDs []string) ([]*Approval, error)

	// AttemptClaim leases the oldest eligible queued attempt (NotBefore <= now,
	// BlockedOn empty, tenant and pool equal, labels a subset of the runner's) to the runner in
	// one statement: state leased, ClaimedAt and HeartbeatAt now, Deadline now +
	// Timeout, LeaseExpiresAt min(now + LeaseTTL, Deadline). On PostgreSQL it
	// uses FOR UPDATE SKIP LOCKED. ErrNotFound when nothing is eligible.
	AttemptClaim(ctx context.Context, p *AttemptClaimParams) (*Attempt, error)
	// AttemptClaimRun is AttemptClaim that also returns the attempt's run,
	// locked for update after the attempt (the order every call locks
	// them in), in the same statement where the store can.
	AttemptClaimRun(ctx context.Context, p *AttemptClaimParams) (*Attempt, *Run, error)
	// AttemptClaimRuns claims up to len(slots) eligible attempts at once,
	// the ones and in the order AttemptClaimRun would claim them one after
	// another: the i-th claimed gets slots[i]'s lease digest and claim
	// request ID (p's own are not used). Each attempt's run is locked after
	// the attempts, in the same statement where the store can. Nothing
	// eligible: no error, an empty slice.
	AttemptClaimRuns(ctx context.Context, p *AttemptClaimParams, slots []ClaimSlot) ([]ClaimedRun, error)
	// AttemptCreate inserts an attempt. At most one queued or leased attempt
	// may exist per run (ErrAlreadyExists).
	AttemptCreate(ctx context.Context, a *Attempt) error
	// AttemptGetByClaimRequest finds the attempt a runner claimed with a claim
	// request ID.
	AttemptGetByClaimRequest(ctx context.Context, runnerID, requestID string) (*Attempt, error)
	// AttemptGetByID reads an attempt; forUpdate locks its row until the
	// transaction ends.
	AttemptGetByID(ctx context.Context, id string, forUpdate bool) (*Attempt, error)
	// AttemptForCall reads and locks the attempt a runner's call names, with
	// withRun also its run (else nil), and the database clock (now, when not
	// nil, stands in for it) — in one statement, as every attempt-scoped call
	// starts with these three.
	AttemptForCall(ctx context.Context, id string, withRun bool, now *time.Time) (*Attempt, *Run, time.Time, error)
	// AttemptsForCall is AttemptForCall with its run for several attempts
	// in one statement, locked in ID order: the attempts found, each with
	// its run and the clock, in ID order; missing IDs are left out.
	AttemptsForCall(ctx context.Context, ids []string, now *time.Time) ([]CallRows, error)
	// AttemptListByRun lists a run's attempts by number.
	AttemptListByRun(ctx context.Context, runID string) ([]*Attempt, error)
	// AttemptListByRuns lists the attempts of several runs, each run's by
	// number (one statement for a page of runs).
	AttemptListByRuns(ctx context.Context, runIDs []string) ([]*Attempt, error)
	// AttemptListExpired lists leased attempts with LeaseExpiresAt <= now,
	// oldest expiry first. It is a snapshot: callers re-check under a lock.
	AttemptListExpired(ctx context.Context, p *AttemptListExpiredParams) ([]*Attempt, error)
	// AttemptListLeasedByRunner lists the attempts a runner holds leased.
	AttemptListLeasedByRunner(ctx context.Context, runnerID string) ([]*Attempt, error)
	// AttemptRenew extends a leased attempt's lease whose digest matches and
	// whose lease has not expired: LeaseExpiresAt = min(now + LeaseTTL,
	// Deadline), HeartbeatAt = now. ErrNotFound when no row matched.
	AttemptRenew(ctx context.Context, p *AttemptRenewParams) (*Attempt, error)
	// AttemptUpdate writes the mutable fields of an attempt (State, RunnerID,
	// LeaseDigest, ClaimRequestID, ClaimedAt, LeaseExpiresAt, Deadline,
	// HeartbeatAt, EndedAt, Result, NotBefore, BlockedOn).
	AttemptUpdate(ctx context.Context, a *Attempt) error

	// AuditAppend appends an event; Seq and At (when zero: now) are assigned.
	AuditAppend(ctx context.Context, e *AuditEvent) error
	// AuditList lists events in sequence order.
	AuditList(ctx context.Context, p *AuditListParams) ([]*AuditEvent, error)

	// CredentialCreate records a minted credential.
	CredentialCreate(ctx context.Context, c *Credential) error
	// CredentialListToRevoke lists unrevoked credentials whose attempt has
	// ended (or whose lease ran out before now): fewest failed revocations
	// first, then oldest.
	CredentialListToRevoke(ctx context.Context, now *time.Time, limit int) ([]*Credential, error)
	// CredentialMarkFailed counts a failed revocation.
	CredentialMarkFailed(ctx context.Context, id string) error
	// CredentialMarkRevoked marks a credential revoked.
	CredentialMarkRevoked(ctx context.Context, id string, now *time.Time) error

	// LeaseAcquire takes every key of Keys for the attempt, or none. It locks
	// the keys' counter rows in sorted key order (so concurrent groups never
	// deadlock), first drops holds whose attempt is no longer leased or whose
	// lease expired before now, then checks that every key has a free slot;
	// if one has not, it returns that key in blockedOn and takes nothing.
	// Otherwise each key gets a free slot and the next value of its own
	// fencing counter (allocated under the row lock; it never goes back).
	LeaseAcquire(ctx context.Context, p *LeaseAcquireParams) (held []LeaseHold, blockedOn string, err error)
	// LeaseForceRelease drops every hold of a key (break-glass), moves its
	// fencing counter on by one so old holders are refused downstream, and
	// unblocks its waiters; it returns the holds it dropped and the new
	// counter value.
	LeaseForceRelease(ctx context.Context, tenant, key string) ([]LeaseHold, int64, error)
	// LeaseKeyConsume marks a once key consumed by a run (if not already).
	LeaseKeyConsume(ctx context.Context, tenant, key, runID string) error
	// LeaseKeyGet reads a key's counter; ErrNotFound if never used.
	LeaseKeyGet(ctx context.Context, tenant, key string) (*LeaseKeyState, error)
	// LeaseKeyLock creates the key's counter row if it does not exist and
	// locks it until the transaction ends, so that transactions checking
	// the key (a run request's on_conflict: reject and once checks) run one
	// after the other and each sees the runs the one before it wrote. Lock
	// several keys in sorted order. Where one writer runs one transaction
	// at a time (SQLite), it only creates the row.
	LeaseKeyLock(ctx context.Context, tenant, key string) error
	// LeaseList lists a tenant's holds whose key starts with prefix, by key
	// and slot.
	LeaseList(ctx context.Context, tenant, prefix string) ([]LeaseHold, error)
	// LeaseLiveRun returns a run of the tenant, not yet finished, that holds
	// or waits for key (its LeaseKeys name it), other than exceptRun;
	// ErrNotFound if none.
	LeaseLiveRun(ctx context.Context, tenant, key, exceptRun string) (string, error)
	// LeaseReleaseAttempt drops the attempt's holds and unblocks the queued
	// attempts waiting for those keys, except those another transaction
	// has locked (see LeaseWakeStranded); it returns the keys released.
	LeaseReleaseAttempt(ctx context.Context, tenant, attemptID string) ([]string, error)
	// LeaseWaiters lists queued attempts blocked on key, oldest first.
	LeaseWaiters(ctx context.Context, tenant, key string) ([]*Attempt, error)
	// LeaseBlockWaiters marks as waiting for key every other queued attempt
	// of the tenant that is not marked yet and whose run names key with
	// this limit, and sets those runs' WaitingFor. Call it only holding
	// key's row lock, having found key full (LeaseAcquire's blockedOn):
	// none of them could take it before a release, and a release unblocks
	// the waiters (LeaseReleaseAttempt, LeaseWakeStranded). Rows another
	// transaction has locked are left as they are (a claim that meets one
	// marks it then).
	LeaseBlockWaiters(ctx context.Context, tenant, key string, limit int) (int, error)
	// LeaseWakeStranded makes claimable again up to limit queued attempts,
	// of any tenant, waiting for a key that nobody holds, and reports how
	// many. A release leaves a waiter that another transaction has locked
	// as it is (waiting for that lock could close a cycle); the next
	// release of the key wakes it, and this sweep wakes it when there is
	// none. Rows locked by another transaction are skipped here too.
	LeaseWakeStranded(ctx context.Context, limit int) (int, error)

	// LogAppend stores a chunk; it reports false when the chunk was already stored.
	LogAppend(ctx context.Context, p *LogAppendParams) (bool, error)
	// LogAppends is LogAppend of each chunk, in one statement where the
	// store can; the chunks name distinct (attempt, seq). It does not say
	// which chunks were new.
	LogAppends(ctx context.Context, ps []*LogAppendParams) error
	// LogList lists a run's lines with ID > After in order.
	LogList(ctx context.Context, p *LogListParams) ([]*LogLine, error)
	// LogArchiveList lists a run's log archives that are not being
	// deleted, by FirstID.
	LogArchiveList(ctx context.Context, runID string) ([]*LogArchive, error)

	// NonceInsert records a runner's nonce; ErrAlreadyExists when it is known.
	NonceInsert(ctx context.Context, runnerID, nonce string, expiresAt time.Time) error
	// NonceInsertMany records several nonces in one statement and reports,
	// for each, whether it was new. Of duplicates within the list only the
	// first can be new.
	NonceInsertMany(ctx context.Context, nonces []Nonce) ([]bool, error)
	// NoncePurge deletes nonces that expired before now.
	NoncePurge(ctx context.Context, now *time.Time) (int, error)

	// Now returns now if it is not nil, else the database's statement clock.
	Now(ctx context.Context, now *time.Time) (time.Time, error)

	// PrincipalCreate inserts a principal (ErrAlreadyExists on tenant+name).
	PrincipalCreate(ctx context.Context, p *Principal) error
	// PrincipalGetByName reads a principal of a tenant.
	PrincipalGetByName(ctx context.Context, tenant, name string) (*Principal, error)

	// RegTokenCreate inserts a registration token.
	RegTokenCreate(ctx context.Context, t *RegToken) error
	// RegTokenUse marks an unused, unexpired token used and returns it, in one
	// statement, so that of concurrent uses exactly one wins. ErrNotFound otherwise.
	RegTokenUse(ctx context.Context, digest string, now *time.Time) (*RegToken, error)

	// RunCreate inserts a run. ErrAlreadyExists when (tenant, actor,
	// idempotency key) is taken.
	RunCreate(ctx context.Context, r *Run) error
	// RunCreateQueued is RunCreate followed by AttemptCreate of the run's
	// first attempt, in one statement where the store can. A zero
	// a.CreatedAt or a.NotBefore becomes the run's CreatedAt. When the
	// run's insert finds its idempotency key taken (ErrAlreadyExists), the
	// attempt is not inserted either.
	RunCreateQueued(ctx context.Context, r *Run, a *Attempt) error
	// RunsCreateQueued is RunCreateQueued of each pair (a run and its first
	// attempt), in one statement where the store can. ErrAlreadyExists
	// when a run's idempotency key is taken; the transaction must then be
	// rolled back, since other runs may have been inserted.
	RunsCreateQueued(ctx context.Context, pairs []AttemptRun) error
	// AttemptRunUpdate is AttemptUpdate of a then RunUpdate of r, in one
	// statement where the store can. ErrNotFound when either row is
	// missing; then neither is updated.
	AttemptRunUpdate(ctx context.Context, a *Attempt, r *Run) error
	// AttemptRunUpdates is AttemptRunUpdate of each pair, in one statement
	// where the store can. The pairs name distinct attempts and distinct
	// runs, whose rows the caller has locked. ErrNotFound when a row is
	// missing; the transaction must then be rolled back, since some rows
	// may have been updated.
	AttemptRunUpdates(ctx context.Context, pairs []AttemptRun) error
	// RunGetByID reads a run; forUpdate locks it.
	RunGetByID(ctx context.Context, id string, forUpdate bool) (*Run, error)
	// RunGetByIdempotencyKey reads the run a principal created with a key.
	RunGetByIdempotencyKey(ctx context.Context, tenant, actor, key string) (*Run, error)
	// RunList pages a tenant's runs, newest first.
	RunList(ctx context.Context, p *RunListParams) ([]*Run, error)
	// RunListPendingApproval lists runs waiting for approval created before
	// a time, oldest first, across tenants (for expiry).
	RunListPendingApproval(ctx context.Context, createdBefore time.Time, limit int) ([]*Run, error)
	// RunUpdate writes the mutable fields of a run (State, Decision, Grants,
	// WaitingFor, CountedAttempts, CancelRequested, UpdatedAt, FinishedAt).
	RunUpdate(ctx context.Context, r *Run) error
	// RunUpdates is RunUpdate of each run, in one statement where the
	// store can. The runs are distinct and their rows locked by the
	// caller. ErrNotFound when one is missing; the transaction must then
	// be rolled back.
	RunUpdates(ctx context.Context, runs []*Run) error

	// RunnerCreate inserts a runner.
	RunnerCreate(ctx context.Context, r *Runner) error
	// RunnerGetByID reads a runner; forUpdate locks it.
	RunnerGetByID(ctx context.Context, id string, forUpdate bool) (*Runner, error)
	// RunnerList lists a tenant's runners.
	RunnerList(ctx context.Context, tenant string) ([]*Runner, error)
	// RunnerTouch sets LastSeenAt to now.
	RunnerTouch(ctx context.Context, id string, now *time.Time) error
	// RunnerUpdate writes Status, PublicKey, KeyFingerprint, Labels,
	// Executor and Capabilities.
	RunnerUpdate(ctx context.Context, r *Runner) error

	// SecretGet reads a secret of a tenant for a channel ("" for all channels).
	SecretGet(ctx context.Context, tenant, name, channel string) (*Secret, error)
	// SecretPut creates or replaces a secret.
	SecretPut(ctx context.Context, s *Secret) error

	// SigningKeyCreate stores a new signing key.
	SigningKeyCreate(ctx context.Context, k *SigningKey) error
	// SigningKeyDelete removes a key no token can still need.
	SigningKeyDelete(ctx context.Context, kid string) error
	// SigningKeyList lists the keys, oldest first.
	SigningKeyList(ctx context.Context) ([]*SigningKey, error)
	// SigningKeyRetire stops a key from signing (it stays published).
	SigningKeyRetire(ctx context.Context, kid string, at time.Time) error

	// TenantEnsure returns the tenant with this name, creating it if needed.
	TenantEnsure(ctx context.Context, name string, now *time.Time) (*Tenant, error)
	// TenantGetByID reads a tenant.
	TenantGetByID(ctx context.Context, id string) (*Tenant, error)

	// WakeClaimers tells long-polling claimers, on every server replica, that
	// work may be available once this transaction commits (NOTIFY on
	// PostgreSQL; an in-process broadcast after commit on SQLite).
	WakeClaimers(ctx context.Context) error
	// WakeWatchers tells this server's waiters (log followers) that a run's
	// output or state changed, once this transaction commits: an in-process
	// broadcast, with no NOTIFY on PostgreSQL. It is for changes that make
	// no work claimable. Followers on other replicas poll and see the
	// change within their poll interval; a NOTIFY would cost every such
	// commit PostgreSQL's database-wide notification lock.
	WakeWatchers(ctx context.Context) error
}

// Tx is a transaction.
type Tx interface {
	Queries
}

// Store is a database.
type Store interface {
	Queries
	// InTx runs fn in one transaction and commits it. fn may run more than once:
	// the store retries it on serialization failures and deadlocks, so fn must
	// have no side effects outside tx. A broken COMMIT is ErrCommitUnknown.
	InTx(ctx context.Context, fn func(tx Tx) error) error
	// InTxNonce is InTx for a signed request whose nonce n is still
	// pending: the transaction records n before fn runs, and a known nonce
	// is ErrReplay (fn does not run). Once it returns nil, n is recorded.
	// A nil or recorded n makes it InTx.
	InTxNonce(ctx context.Context, n *PendingNonce, fn func(tx Tx) error) error
	// SingleWriter reports whether write transactions run one at a time
	// (SQLite): none then waits for another's row locks.
	SingleWriter() bool
	// Wake returns a channel that is closed the next time work may be available
	// (see WakeClaimers). Take a new one after each wake.
	Wake() <-chan struct{}
	// RunnerGetCached is RunnerGetByID for authenticating a runner's
	// request, outside any transaction, through a ReadCache.
	RunnerGetCached(ctx context.Context, id string) (*Runner, error)
	// APITokenGetCached is APITokenGetByDigest for authenticating a request,
	// through a ReadCache (a revocation forgets the entry).
	APITokenGetCached(ctx context.Context, digest string) (*APIToken, *Principal, error)
	// GitHubInstallationByTenantCached is GitHubInstallationGetByTenant
	// through a ReadCache (ErrNotFound, a tenant without one, included).
	GitHubInstallationByTenantCached(ctx context.Context, tenant string) (*GitHubInstallation, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Close releases the connections.
	Close() error
}

// ---- catalogs (channel activations and rejections) ----

// CatalogStatus is the state of one commit of one channel's branch.
type CatalogStatus string

// Catalog statuses: the active commit of a (channel, branch), a commit that
// did not validate, and a commit that was active before the current one.
const (
	CatalogActive     CatalogStatus = "active"
	CatalogRejected   CatalogStatus = "rejected"
	CatalogSuperseded CatalogStatus = "superseded"
)

// Catalog records what the server decided about one commit of one branch of
// a channel. (Tenant, Channel, Branch, Commit) is unique.
type Catalog struct {
	Tenant      string
	Channel     string
	Branch      string
	Commit      string
	Status      CatalogStatus
	Errors      json.RawMessage // rejected: [{"file","line","column","message"}]
	Author      string
	CommittedAt time.Time
	LoadedAt    time.Time // when the server first decided (or re-activated); zero: now
}

// CatalogListParams filter CatalogList; empty fields match everything.
type CatalogListParams struct {
	Tenant  string
	Channel string
	Status  CatalogStatus
	Limit   int
}

// CatalogQueries are the catalog methods of Queries.
type CatalogQueries interface {
	// CatalogGet reads the record of one commit of a channel's branch.
	CatalogGet(ctx context.Context, tenant, channel, branch, commit string) (*Catalog, error)
	// CatalogInsert records a commit (ErrAlreadyExists when it is known).
	CatalogInsert(ctx context.Context, c *Catalog) error
	// CatalogList lists records, newest LoadedAt first.
	CatalogList(ctx context.Context, p *CatalogListParams) ([]*Catalog, error)
	// CatalogSetStatus changes a record's status and sets LoadedAt (zero:
	// now); ErrNotFound when there is no such record.
	CatalogSetStatus(ctx context.Context, c *Catalog) error
	// CatalogSupersede marks every active record of a channel's branch
	// other than keepCommit superseded and reports how many it changed.
	CatalogSupersede(ctx context.Context, tenant, channel, branch, keepCommit string) (int, error)
}

// ---- schedules ----

// Schedule is the firing state of one job's schedule on a channel: the next
// fire time to claim and the last window fired, with the expression, zone
// and commit NextFireAt was computed from.
type Schedule struct {
	Tenant     string
	Channel    string
	Job        string
	Cron       string
	TZ         string
	Commit     string
	NextFireAt time.Time
	LastWindow *time.Time // nil until the first firing
	UpdatedAt  time.Time  // zero: now
}

// ScheduleQueries are the schedule methods of Queries.
type ScheduleQueries interface {
	// ScheduleAdvance moves a schedule on, writing Cron, TZ, Commit,
	// NextFireAt, LastWindow and UpdatedAt (zero: now), only if its stored
	// next fire time is still oldNext: of concurrent claims of one fire time
	// exactly one wins. ErrNotFound when no row matched (another replica
	// claimed it, or there is no such schedule).
	ScheduleAdvance(ctx context.Context, s *Schedule, oldNext time.Time) error
	// ScheduleDelete forgets a schedule that no catalog declares any more
	// (ErrNotFound when there is none).
	ScheduleDelete(ctx context.Context, tenant, channel, job string) error
	// ScheduleGet reads the state of a job's schedule on a channel.
	ScheduleGet(ctx context.Context, tenant, channel, job string) (*Schedule, error)
	// ScheduleInsert records a schedule first seen (ErrAlreadyExists when
	// another replica recorded it first).
	ScheduleInsert(ctx context.Context, s *Schedule) error
	// ScheduleList lists a tenant's schedules by channel and job.
	ScheduleList(ctx context.Context, tenant string) ([]*Schedule, error)
}
