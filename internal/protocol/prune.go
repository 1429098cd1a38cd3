package protocol

import "time"

// PruneItem is one thing a retention sweep would delete now
// (GET /v1/admin/prune).
type PruneItem struct {
	// Kind is "logs" or "artifacts" of a run, "capability" for an
	// artifact row nothing will complete, or "logs_move" for a run whose
	// logs would move from the database to the object store (kept, not
	// deleted).
	Kind   string    `json:"kind"`
	Tenant string    `json:"tenant"`
	RunID  string    `json:"run_id"`
	Job    string    `json:"job,omitempty"`
	DueAt  time.Time `json:"due_at"`
	// Artifact names the artifact row of a "capability".
	Artifact *PruneArtifact `json:"artifact,omitempty"`
}

// PruneArtifact is an artifact row a sweep would drop.
type PruneArtifact struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State string `json:"state"`
}

// PrunePlan is the answer of GET /v1/admin/prune, earliest due first.
type PrunePlan struct {
	Items []PruneItem `json:"items"`
}

// PruneReport is what one retention sweep did (POST /v1/admin/prune).
type PruneReport struct {
	// Skipped is true when another replica holds the sweep's lease.
	Skipped bool `json:"skipped"`
	// Stamped counts ended runs whose retention periods were fixed.
	Stamped int `json:"stamped"`
	// LogRuns and LogLines count runs whose logs were deleted, and lines.
	LogRuns  int `json:"log_runs"`
	LogLines int `json:"log_lines"`
	// ArtifactRuns and Artifacts count runs whose artifacts were deleted,
	// and artifacts.
	ArtifactRuns int `json:"artifact_runs"`
	Artifacts    int `json:"artifacts"`
	// Capabilities counts expired or abandoned artifact rows, Tickets
	// expired source tickets.
	Capabilities int `json:"capabilities"`
	Tickets      int `json:"tickets"`
	// LogArchives counts attempts whose logs moved to the object store,
	// LogLinesMoved their lines, LogRunsMoved the runs that finished moving.
	LogArchives   int `json:"log_archives"`
	LogLinesMoved int `json:"log_lines_moved"`
	LogRunsMoved  int `json:"log_runs_moved"`
	// StagedUploads counts staged uploads a crash left in the object store.
	StagedUploads int `json:"staged_uploads"`
}
