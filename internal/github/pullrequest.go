package github

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// PullRequestEvent is the payload of a "pull_request" event, reduced to
// what jobplane acts on.
type PullRequestEvent struct {
	Action       string          `json:"action"`
	Number       int             `json:"number"`
	Installation InstallationRef `json:"installation"`
	Repository   Repository      `json:"repository"`
	Sender       User            `json:"sender"`
	PullRequest  struct {
		Number int  `json:"number"`
		Draft  bool `json:"draft"`
		// UpdatedAt orders a pull request's events: a push makes it
		// later, and a redelivery carries its original payload.
		UpdatedAt time.Time `json:"updated_at"`
		Head      struct {
			SHA  string `json:"sha"`
			Ref  string `json:"ref"`
			Repo *struct {
				FullName string `json:"full_name"`
			} `json:"repo"`
		} `json:"head"`
		Base struct {
			Ref string `json:"ref"`
		} `json:"base"`
	} `json:"pull_request"`
}

// HeadSHA is the exact commit the pull request's head points at.
func (e *PullRequestEvent) HeadSHA() string { return e.PullRequest.Head.SHA }

// Fork reports whether the head branch lives in another repository than
// the base. It compares the two repositories rather than trusting
// head.repo.fork, which only says the head repository is some fork (a
// pull request between two branches of a forked repository is not from a
// fork). A head repository that was deleted (null) counts as a fork: its
// origin can no longer be established.
func (e *PullRequestEvent) Fork() bool {
	h := e.PullRequest.Head.Repo
	return h == nil || !strings.EqualFold(h.FullName, e.Repository.FullName)
}

// ParsePullRequestEvent decodes and checks a pull_request event.
func ParsePullRequestEvent(body []byte) (*PullRequestEvent, error) {
	ev := &PullRequestEvent{}
	if err := json.Unmarshal(body, ev); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrPayload, err.Error())
	}
	if ev.Action == "" {
		return nil, fmt.Errorf("%w: action is missing", ErrPayload)
	}
	if ev.Installation.ID <= 0 {
		return nil, fmt.Errorf("%w: installation.id is missing", ErrPayload)
	}
	if ev.Repository.ID <= 0 {
		return nil, fmt.Errorf("%w: repository.id is missing", ErrPayload)
	}
	if _, _, err := splitRepo(ev.Repository.FullName); err != nil {
		return nil, fmt.Errorf("%w: repository.full_name %q is not owner/name", ErrPayload, ev.Repository.FullName)
	}
	if ev.Number <= 0 {
		ev.Number = ev.PullRequest.Number
	}
	if ev.Number <= 0 {
		return nil, fmt.Errorf("%w: number is missing", ErrPayload)
	}
	if !validSHA(ev.PullRequest.Head.SHA) {
		return nil, fmt.Errorf("%w: pull_request.head.sha %q is not a commit ID", ErrPayload, ev.PullRequest.Head.SHA)
	}
	if ev.Sender.Login == "" {
		return nil, fmt.Errorf("%w: sender.login is missing", ErrPayload)
	}
	return ev, nil
}
