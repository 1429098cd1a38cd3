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
	Connectors map[string]SpecConnector `json:"connectors,omitempty"`
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
}

// SpecConnector is one connector a job declares.
type SpecConnector struct {
	Declared string                `json:"declared"` // read | write
	Def      *connector.Definition `json:"definition"`
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
