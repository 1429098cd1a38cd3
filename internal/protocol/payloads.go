package protocol

import (
	"encoding/json"
	"fmt"
	"time"
)

// Runner endpoints.

// RegisterRequest is the body of POST /v1/runner/register.
type RegisterRequest struct {
	Name      string   `json:"name"`
	PublicKey string   `json:"public_key"`
	Labels    []string `json:"labels"`
	Version   string   `json:"version"`
	// Executor and Capabilities say what runs the runner's jobs; absent,
	// the process executor without isolation (docs/protocol.md).
	Executor     string        `json:"executor,omitempty"`
	Capabilities *Capabilities `json:"capabilities,omitempty"`
}

// Capabilities is what a runner's executor can do. The server hands a
// runner only attempts whose needs they cover.
type Capabilities struct {
	// Images: the executor runs a job's run.image.
	Images bool `json:"images"`
	// Isolated: the job cannot reach the runner's key, files or processes.
	Isolated bool `json:"isolated"`
}

// String is how the CLI and the web UI show c: "isolated" or "not
// isolated", then ", images" when it runs images.
func (c Capabilities) String() string {
	s := "not isolated"
	if c.Isolated {
		s = "isolated"
	}
	if c.Images {
		s += ", images"
	}
	return s
}

// ExecutorProcess is the executor of a runner that names none.
const ExecutorProcess = "process"

// CheckExecutor refuses an executor name that is not 1 to 32 of
// [a-z0-9-], starting with a letter ("" stands for ExecutorProcess).
func CheckExecutor(name string) error {
	if name == "" {
		return nil
	}
	ok := len(name) <= 32 && name[0] >= 'a' && name[0] <= 'z'
	for _, c := range []byte(name) {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if !ok {
		return fmt.Errorf("executor must be 1 to 32 of a-z, 0-9 and -, starting with a letter")
	}
	return nil
}

// RegisterResponse answers a registration.
type RegisterResponse struct {
	RunnerID string   `json:"runner_id"`
	Tenant   string   `json:"tenant"`
	Pool     string   `json:"pool"`
	Labels   []string `json:"labels"`
	Status   string   `json:"status"`
}

// HeartbeatRequest is the body of POST /v1/runner/heartbeat.
type HeartbeatRequest struct {
	Status   string   `json:"status"` // idle | busy
	Attempts []string `json:"attempts"`
	// Executor and Capabilities as at registration: a runner restarted
	// with another executor states it here; absent, the process executor
	// without isolation.
	Executor     string        `json:"executor,omitempty"`
	Capabilities *Capabilities `json:"capabilities,omitempty"`
}

// HeartbeatResponse tells a runner the server time and which of its attempts to stop.
type HeartbeatResponse struct {
	ServerTime     time.Time `json:"server_time"`
	Status         string    `json:"status"`
	CancelAttempts []string  `json:"cancel_attempts"`
}

// ClaimRequest is the body of POST /v1/runner/claim.
type ClaimRequest struct {
	WaitSeconds int    `json:"wait_seconds"`
	RequestID   string `json:"request_id,omitempty"`
	// Max asks for up to this many attempts in one claim (1..MaxClaimBatch),
	// answered with a ClaimBatch. Absent (0): one attempt, answered with an
	// Assignment, as for runners that predate it.
	Max int `json:"max,omitempty"`
}

// MaxClaimBatch bounds a claim's max.
const MaxClaimBatch = 32

// ClaimBatch answers a claim that set max: between 1 and max assignments
// (a claim that gets none is answered 204, as always).
type ClaimBatch struct {
	Assignments []*Assignment `json:"assignments"`
}

// Assignment is the answer to a successful claim.
type Assignment struct {
	RunID     string `json:"run_id"`
	AttemptID string `json:"attempt_id"`
	// Tenant is the attempt's tenant, for the labels an executor puts on
	// what it creates.
	Tenant        string            `json:"tenant,omitempty"`
	AttemptNumber int               `json:"attempt_number"`
	Lease         Lease             `json:"lease"`
	Job           AssignedJob       `json:"job"`
	Params        json.RawMessage   `json:"params"`
	RunToken      *RunToken         `json:"run_token,omitempty"`
	Leases        []FencedKey       `json:"leases"`
	Artifacts     []ArtifactSpec    `json:"artifacts"`
	Source        *SourceDescriptor `json:"source,omitempty"`
	// Connectors names the connectors the job declares; the job fetches
	// their credentials with its run token from GET /v1/run/connectors.
	Connectors []string `json:"connectors,omitempty"`
}

// RunConnectors answers GET /v1/run/connectors: the environment to add to
// the job's process, and the values to mask in its output.
type RunConnectors struct {
	Env  map[string]string `json:"env"`
	Mask []string          `json:"mask"`
}

// Lease is an attempt lease as handed to its runner.
type Lease struct {
	Token      string    `json:"token"`
	ExpiresAt  time.Time `json:"expires_at"`
	Deadline   time.Time `json:"deadline"`
	TTLSeconds int       `json:"ttl_seconds"`
}

// AssignedJob is the pinned job definition an attempt executes.
type AssignedJob struct {
	Name           string            `json:"name"`
	Channel        string            `json:"channel"`
	Commit         string            `json:"commit"`
	Command        []string          `json:"command"`
	Env            map[string]string `json:"env"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	// Image, Resources, Network and Workdir are the job's run block
	// (absent: the runner's host, unlimited, the default network, the
	// workspace).
	Image     string             `json:"image,omitempty"`
	Resources *AssignedResources `json:"resources,omitempty"`
	Network   string             `json:"network,omitempty"`
	Workdir   string             `json:"workdir,omitempty"`
}

// AssignedResources is run.resources as a claim hands it out (0: not
// limited).
type AssignedResources struct {
	CPUMillis   int64 `json:"cpu_millis,omitempty"`
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// RunToken is a run's signed identity for its attempt.
type RunToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// FencedKey is a run lease key with the fencing token of this acquisition.
type FencedKey struct {
	Key          string `json:"key"`
	FencingToken int64  `json:"fencing_token"`
}

// ArtifactSpec is an artifact the job declares.
type ArtifactSpec struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	MaxBytes int64  `json:"max_bytes"`
}

// SourceDescriptor names the repository and commit a job runs against.
type SourceDescriptor struct {
	Repo   string `json:"repo"`
	Commit string `json:"commit"`
}

// RenewResponse answers POST /v1/runner/attempt/renew.
type RenewResponse struct {
	ExpiresAt       time.Time `json:"expires_at"`
	CancelRequested bool      `json:"cancel_requested"`
}

// LogLine is one line of a job's output.
type LogLine struct {
	At     time.Time `json:"at"`
	Stream string    `json:"stream"` // stdout | stderr | system
	Text   string    `json:"text"`
}

// LogsRequest is the body of POST /v1/runner/attempt/logs.
type LogsRequest struct {
	Seq   int64     `json:"seq"`
	Lines []LogLine `json:"lines"`
}

// RelinquishRequest is the body of POST /v1/runner/attempt/relinquish.
type RelinquishRequest struct {
	Reason string `json:"reason"`
}

// ResultRequest is the body of POST /v1/runner/attempt/result.
type ResultRequest struct {
	Outcome   string   `json:"outcome"` // succeeded | failed
	ExitCode  int      `json:"exit_code"`
	Summary   string   `json:"summary"`
	Artifacts []string `json:"artifacts"`
	RequestID string   `json:"request_id,omitempty"`
	// Logs is the attempt's last log chunk, stored in the result's
	// transaction as POST /v1/runner/attempt/logs would store it: a job's
	// final output and its result then cost one request, not two.
	Logs *LogsRequest `json:"logs,omitempty"`
}

// ResultResponse answers a result.
type ResultResponse struct {
	RunState string `json:"run_state"`
}

// ResultsRequest is the body of POST /v1/runner/results: the results of
// several of the runner's attempts in one signed call. Each item names its
// attempt and carries the attempt's lease token, which is the item's
// authority as the Jobplane-Lease header is a single result's.
type ResultsRequest struct {
	Results []ResultItem `json:"results"`
}

// MaxResultsBatch bounds the items of a ResultsRequest.
const MaxResultsBatch = 32

// ResultItem is one attempt's result in a ResultsRequest.
type ResultItem struct {
	RunID      string `json:"run_id"`
	AttemptID  string `json:"attempt_id"`
	LeaseToken string `json:"lease_token"`
	ResultRequest
}

// ResultsResponse answers POST /v1/runner/results: one answer per item, in
// the items' order.
type ResultsResponse struct {
	Results []ResultAnswer `json:"results"`
}

// ResultAnswer is one item's answer: the run's state when the result was
// accepted (or was already recorded), else the problem that refused it.
type ResultAnswer struct {
	AttemptID string   `json:"attempt_id"`
	RunState  string   `json:"run_state,omitempty"`
	Error     *Problem `json:"error,omitempty"`
}

// RotateKeyRequest is the body of POST /v1/runner/keys.
type RotateKeyRequest struct {
	PublicKey string `json:"public_key"`
}

// Admin endpoints.

// RegistrationTokenRequest is the body of POST /v1/runners/registration-tokens.
type RegistrationTokenRequest struct {
	Pool         string   `json:"pool"`
	Labels       []string `json:"labels"`
	AllowedRepos []string `json:"allowed_repos"`
	SelfHosted   bool     `json:"self_hosted"`
	TTLSeconds   int      `json:"ttl_seconds"`
}

// TokenResponse carries a secret shown once.
type TokenResponse struct {
	ID        string     `json:"id,omitempty"`
	Token     string     `json:"token"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// Runner is a registered runner as the admin API shows it.
type Runner struct {
	ID             string     `json:"id"`
	Tenant         string     `json:"tenant"`
	Pool           string     `json:"pool"`
	Name           string     `json:"name"`
	Labels         []string   `json:"labels"`
	Status         string     `json:"status"`
	SelfHosted     bool       `json:"self_hosted"`
	KeyFingerprint string     `json:"key_fingerprint"`
	LastSeenAt     *time.Time `json:"last_seen_at"`
	CreatedAt      time.Time  `json:"created_at"`
	Attempts       []string   `json:"attempts"`
	// Executor and Capabilities as the runner last stated them.
	Executor     string       `json:"executor"`
	Capabilities Capabilities `json:"capabilities"`
}

// RunnerList answers GET /v1/runners.
type RunnerList struct {
	Runners []Runner `json:"runners"`
}

// PrincipalRequest is the body of POST /v1/principals.
type PrincipalRequest struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // user | service
}

// Principal is an API principal.
type Principal struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
}

// PrincipalTokenRequest is the body of POST /v1/principals/{name}/tokens.
type PrincipalTokenRequest struct {
	TTLSeconds int `json:"ttl_seconds,omitempty"`
}

// Control endpoints.

// RunRequest is the body of POST /v1/runs.
type RunRequest struct {
	Job            string          `json:"job"`
	Channel        string          `json:"channel"`
	Ref            string          `json:"ref,omitempty"`
	Params         json.RawMessage `json:"params,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Reason         string          `json:"reason,omitempty"`
}

// RunsRequest is the body of POST /v1/runs/batch: several run requests in
// one call (a backfill), each decided and recorded as POST /v1/runs would.
type RunsRequest struct {
	Runs []RunRequest `json:"runs"`
}

// MaxRunBatch bounds the items of a RunsRequest.
const MaxRunBatch = 100

// RunsResponse answers POST /v1/runs/batch: one answer per item, in the
// items' order.
type RunsResponse struct {
	Runs []RunAnswer `json:"runs"`
}

// RunAnswer is one item's answer: the status POST /v1/runs would have
// answered it with, and the run (201 created, 200 the earlier run of its
// idempotency key) or the problem that refused it.
type RunAnswer struct {
	Status int      `json:"status"`
	Run    *Run     `json:"run,omitempty"`
	Error  *Problem `json:"error,omitempty"`
}

// RunBrief is the run as POST /v1/runs and POST /v1/runs/batch answer it
// when the caller sends "Prefer: return=minimal": what a caller that has
// just requested the run needs to follow it, without the decision record,
// parameters and source it sent or can read with GET /v1/runs/{id}. Its
// fields are Run's, so a client decodes either answer into Run.
type RunBrief struct {
	ID         string    `json:"id"`
	State      string    `json:"state"`
	WaitingFor string    `json:"waiting_for"`
	CreatedAt  time.Time `json:"created_at"`
}

// Run is a run as every endpoint that returns one returns it.
type Run struct {
	ID              string          `json:"id"`
	State           string          `json:"state"`
	Job             string          `json:"job"`
	Channel         string          `json:"channel"`
	Ref             string          `json:"ref"`
	Commit          string          `json:"commit"`
	Params          json.RawMessage `json:"params"`
	Actor           string          `json:"actor"`
	Reason          string          `json:"reason"`
	Source          json.RawMessage `json:"source"`
	Decision        json.RawMessage `json:"decision"`
	Grants          json.RawMessage `json:"grants"`
	LeaseKeys       json.RawMessage `json:"lease_keys"`
	WaitingFor      string          `json:"waiting_for"`
	Attempts        []Attempt       `json:"attempts"`
	Approvals       []Approval      `json:"approvals"`
	CancelRequested bool            `json:"cancel_requested"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	FinishedAt      *time.Time      `json:"finished_at"`
	// Timeline is the run's history from its audit trail; only GET
	// /v1/runs/{id} fills it.
	Timeline []TimelineEntry `json:"timeline,omitempty"`
}

// Attempt is one execution attempt of a run.
type Attempt struct {
	ID             string          `json:"id"`
	Number         int             `json:"number"`
	State          string          `json:"state"`
	Runner         string          `json:"runner"`
	CreatedAt      time.Time       `json:"created_at"`
	ClaimedAt      *time.Time      `json:"claimed_at"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	Deadline       *time.Time      `json:"deadline"`
	EndedAt        *time.Time      `json:"ended_at"`
	Result         json.RawMessage `json:"result"`
}

// Approval is one approver's verdict.
type Approval struct {
	Approver string    `json:"approver"`
	Verdict  string    `json:"verdict"`
	Comment  string    `json:"comment"`
	At       time.Time `json:"at"`
}

// RunList answers GET /v1/runs.
type RunList struct {
	Runs       []Run  `json:"runs"`
	NextCursor string `json:"next_cursor"`
}

// RunLogLine is a stored log line as GET /v1/runs/{id}/logs returns it.
type RunLogLine struct {
	ID        int64     `json:"id"`
	AttemptID string    `json:"attempt_id"`
	At        time.Time `json:"at"`
	Stream    string    `json:"stream"`
	Text      string    `json:"text"`
}

// LogList answers GET /v1/runs/{id}/logs without follow.
type LogList struct {
	Lines    []RunLogLine `json:"lines"`
	Next     int64        `json:"next"`
	RunState string       `json:"run_state"`
	Done     bool         `json:"done"`
}

// CommentRequest is the body of approve, reject and cancel.
type CommentRequest struct {
	Comment string `json:"comment,omitempty"`
}

// AuditEvent is one audited mutation.
type AuditEvent struct {
	Seq     int64           `json:"seq"`
	At      time.Time       `json:"at"`
	Actor   string          `json:"actor"`
	Action  string          `json:"action"`
	Subject string          `json:"subject"`
	Details json.RawMessage `json:"details"`
	// Hash and PrevHash are the event's link in the audit chain, empty
	// until the sealer reached it.
	Hash     string `json:"hash,omitempty"`
	PrevHash string `json:"prev_hash,omitempty"`
}

// AuditList answers GET /v1/audit.
type AuditList struct {
	Events []AuditEvent `json:"events"`
	Next   int64        `json:"next"`
}

// LeaseView is a key as GET /v1/leases/{key} shows it: its holders and
// the runs waiting for it.
type LeaseView struct {
	Key              string        `json:"key"`
	LastFencingToken int64         `json:"last_fencing_token"`
	ConsumedByRun    string        `json:"consumed_by_run,omitempty"`
	Holders          []LeaseHolder `json:"holders"`
	Waiting          []LeaseWaiter `json:"waiting"`
}

// LeaseHolder is one hold of a key (GET /v1/leases lists them).
type LeaseHolder struct {
	Key          string     `json:"key"`
	Slot         int        `json:"slot"`
	RunID        string     `json:"run_id"`
	AttemptID    string     `json:"attempt_id"`
	Runner       string     `json:"runner"`
	FencingToken int64      `json:"fencing_token"`
	AcquiredAt   time.Time  `json:"acquired_at"`
	ExpiresAt    *time.Time `json:"expires_at"`
}

// LeaseWaiter is a run waiting for a key.
type LeaseWaiter struct {
	RunID     string    `json:"run_id"`
	AttemptID string    `json:"attempt_id"`
	Since     time.Time `json:"since"`
}
