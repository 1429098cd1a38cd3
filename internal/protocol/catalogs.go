package protocol

import (
	"encoding/json"
	"time"
)

// CatalogError is one validation error of a rejected commit.
type CatalogError struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
}

// CatalogsView is the answer of GET /v1/catalogs (docs/protocol.md).
type CatalogsView struct {
	Channels []ChannelView `json:"channels"`
}

// ChannelView is one branch of one channel.
type ChannelView struct {
	Channel      string         `json:"channel"`
	Branch       string         `json:"branch"`
	ActiveCommit string         `json:"active_commit"`
	ActivatedAt  *time.Time     `json:"activated_at"`
	Author       string         `json:"author,omitempty"`
	Head         string         `json:"head,omitempty"`
	Error        string         `json:"error,omitempty"`
	Rejected     []RejectedView `json:"rejected"`
}

// RejectedView is a rejected commit as the API shows it; At is when the
// server rejected it.
type RejectedView struct {
	Commit      string         `json:"commit"`
	Author      string         `json:"author,omitempty"`
	CommittedAt time.Time      `json:"committed_at"`
	At          time.Time      `json:"at"`
	Errors      []CatalogError `json:"errors"`
}

// JobInfo describes a job of a catalog.
type JobInfo struct {
	Name        string          `json:"name"`
	File        string          `json:"file"`
	Description string          `json:"description,omitempty"`
	Owners      []string        `json:"owners"`
	Runbook     string          `json:"runbook,omitempty"`
	RunbookText string          `json:"runbook_text,omitempty"`
	Definition  json.RawMessage `json:"definition,omitempty"`

	// RunbookMarkdown is the runbook's source, for the web UI to render.
	RunbookMarkdown string `json:"-"`
}

// JobsView is the answer of GET /v1/jobs.
type JobsView struct {
	Channel string    `json:"channel"`
	Branch  string    `json:"branch"`
	Commit  string    `json:"commit"`
	Jobs    []JobInfo `json:"jobs"`
}

// JobView is the answer of GET /v1/jobs/{name}.
type JobView struct {
	Channel string `json:"channel"`
	Branch  string `json:"branch"`
	Commit  string `json:"commit"`
	JobInfo
	// MayRun lists the principals the definitions name whom the policies
	// allow to run the job, evaluated with the job's default parameters.
	MayRun []PrincipalAccess `json:"may_run"`
	// ActorNamed is whether the definitions name the viewing principal,
	// so that "*" in MayRun (any principal they do not name) is not theirs.
	ActorNamed bool `json:"-"`
}

// PrincipalAccess is one principal allowed to run a job.
type PrincipalAccess struct {
	Principal string               `json:"principal"`
	Rule      string               `json:"rule,omitempty"`
	Approval  *ApprovalRequirement `json:"approval,omitempty"`
}

// ApprovalRequirement is how many of which principals must approve a run.
type ApprovalRequirement struct {
	Count     int      `json:"count"`
	Groups    []string `json:"groups"`
	Approvers []string `json:"approvers"`
}

// SchedulesView is the answer of GET /v1/schedules.
type SchedulesView struct {
	Schedules []ScheduleView `json:"schedules"`
}

// ScheduleView is one job's schedule with its next firing.
type ScheduleView struct {
	Job        string     `json:"job"`
	Channel    string     `json:"channel"`
	Cron       string     `json:"cron"`
	TZ         string     `json:"tz"`
	CatchUp    string     `json:"catch_up"`
	NextFireAt *time.Time `json:"next_fire_at"`
	LastWindow *time.Time `json:"last_window"`
	Commit     string     `json:"commit"`
	Error      string     `json:"error,omitempty"`
}
