package protocol

import "time"

// TimelineEntry is one change of a run: when, who, what, and the state it
// left the run in (when the change decides one).
type TimelineEntry struct {
	Seq     int64     `json:"seq"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"`
	Action  string    `json:"action"`
	State   string    `json:"state,omitempty"`
	Attempt string    `json:"attempt,omitempty"`
	Reason  string    `json:"reason,omitempty"`
}

// AuditCheckpoint is a chain head: a sequence number and its link's hash.
type AuditCheckpoint struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// AuditBreak names the first event where the chain does not hold.
type AuditBreak struct {
	Seq    int64  `json:"seq"`
	Reason string `json:"reason"`
}

// AuditVerify answers GET /v1/audit/verify.
type AuditVerify struct {
	OK         bool             `json:"ok"`
	Sealed     int64            `json:"sealed"`
	Head       AuditCheckpoint  `json:"head"`
	Unsealed   int64            `json:"unsealed"`
	Checkpoint *AuditCheckpoint `json:"checkpoint,omitempty"`
	Broken     *AuditBreak      `json:"broken,omitempty"`
}
