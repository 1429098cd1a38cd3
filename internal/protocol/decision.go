package protocol

import "encoding/json"

// Decision is an authorization outcome with its explanation, as a run
// keeps it (Run.Decision) and a denial's problem carries it.
type Decision struct {
	Allowed     bool   `json:"allowed"`
	Rule        string `json:"rule,omitempty"`
	Explanation string `json:"explanation"`
	// Approval is the chosen rule's approval requirement, with the
	// principals who may give it, expanded from its groups at the pinned
	// commit.
	Approval *ApprovalRequirement `json:"approval,omitempty"`
	// Grants are the connector access levels of the chosen rule.
	Grants map[string]string `json:"grants,omitempty"`
	// ForksFull: the chosen rule lifts safe mode (forks: full).
	ForksFull bool `json:"forks_full,omitempty"`
	// Detail is the policy engine's full decision: every rule considered
	// and why it matched or not.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// DecisionRecord is what a run keeps of its authorization (Run.Decision):
// the decision at request time and, once dispatched, the one re-evaluated
// at claim.
type DecisionRecord struct {
	Request  Decision  `json:"request"`
	Dispatch *Decision `json:"dispatch,omitempty"`
}
