package control

import (
	"encoding/json"
	"time"

	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/protocol"
)

// Spec is the part of a job definition a run executes, pinned on the run at
// request time so that it runs exactly what was authorized, whatever happens
// to the branch afterwards.
type Spec struct {
	Name        string            `json:"name"`
	Command     []string          `json:"command"`
	Env         map[string]string `json:"env,omitempty"`
	Timeout     Duration          `json:"timeout"`
	LeaseTTL    Duration          `json:"lease_ttl"`
	Pool        string            `json:"pool"`
	Labels      []string          `json:"labels"`
	MaxAttempts int               `json:"max_attempts"`
	Backoff     Duration          `json:"backoff"`
	// Connectors the job declares, with the level it asks for and the
	// connector's definition at the pinned commit.
	Connectors map[string]connector.Pinned `json:"connectors,omitempty"`
	// Leases are the job's lease key templates.
	Leases []lease.Template `json:"leases,omitempty"`
	// Repo is the GitHub repository the run builds (owner/name), checked
	// against self-hosted runners' allow-lists at claim.
	Repo string `json:"repo,omitempty"`
	// SafeMode keeps the run on managed runners without connectors
	// (a pull request from a fork, docs/github.md).
	SafeMode bool `json:"safe_mode,omitempty"`
	// Artifacts the job declares, and the code it runs in (pinned at request time).
	Artifacts []protocol.ArtifactSpec `json:"artifacts,omitempty"`
	Source    *SpecSource             `json:"source,omitempty"`
	// Workflow is the workflow file a job run by GitHub Actions dispatches
	// (its attempts are in store.ActionsPool); "" for runner jobs.
	Workflow string `json:"workflow,omitempty"`
	// Retention is how long the run's logs and artifacts are kept once it
	// has ended (nil or zero: the server's default; internal/retention).
	Retention *SpecRetention `json:"retention,omitempty"`
	// Image, Resources, Network and Workdir say where and with what the
	// command runs; Isolation "required" keeps the run to isolated
	// runners. Empty: the runner's host, unlimited, the default network,
	// the workspace, any runner.
	Image     string         `json:"image,omitempty"`
	Resources *SpecResources `json:"resources,omitempty"`
	Network   string         `json:"network,omitempty"`
	Workdir   string         `json:"workdir,omitempty"`
	Isolation string         `json:"isolation,omitempty"`
}

// claimResources is run.resources as a claim hands it out.
func (sp Spec) claimResources() *protocol.AssignedResources {
	if sp.Resources == nil || (sp.Resources.CPUMillis == 0 && sp.Resources.MemoryBytes == 0) {
		return nil
	}
	return &protocol.AssignedResources{CPUMillis: sp.Resources.CPUMillis, MemoryBytes: sp.Resources.MemoryBytes}
}

// SpecResources is what one attempt may use (0: not limited).
type SpecResources struct {
	CPUMillis   int64 `json:"cpu_millis,omitempty"`
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// SpecRetention is a job's retention periods.
type SpecRetention struct {
	Logs      Duration `json:"logs,omitempty"`
	Artifacts Duration `json:"artifacts,omitempty"`
}

// Duration is a time.Duration that encodes as a Go duration string.
type Duration time.Duration

// MarshalJSON encodes d as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON decodes "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
