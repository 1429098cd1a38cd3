package github

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Account is the user or organization an App is installed on.
type Account struct {
	Login string `json:"login"`
	Type  string `json:"type"`
}

// InstallationRef is the installation object of an event payload.
type InstallationRef struct {
	ID                  int64   `json:"id"`
	Account             Account `json:"account"`
	RepositorySelection string  `json:"repository_selection"`
}

// Repository is a repository as events list it.
type Repository struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	FullName string `json:"full_name"`
	Private  bool   `json:"private"`
}

// User is an event's sender.
type User struct {
	Login string `json:"login"`
	Type  string `json:"type"`
}

// InstallationEvent is the payload of "installation" and
// "installation_repositories" events.
type InstallationEvent struct {
	Action              string          `json:"action"`
	Installation        InstallationRef `json:"installation"`
	RepositorySelection string          `json:"repository_selection"`
	// Repositories lists the granted repositories ("installation" created).
	Repositories []Repository `json:"repositories"`
	// RepositoriesAdded and RepositoriesRemoved are the change of an
	// "installation_repositories" event.
	RepositoriesAdded   []Repository `json:"repositories_added"`
	RepositoriesRemoved []Repository `json:"repositories_removed"`
	Sender              User         `json:"sender"`
}

// ErrPayload: a payload is not the event it claims to be.
var ErrPayload = errors.New("github: malformed event payload")

// ParseInstallationEvent decodes and checks an installation event. Fields
// jobplane does not use are ignored (GitHub adds fields without notice);
// the ones it uses must be present and well formed.
func ParseInstallationEvent(body []byte) (*InstallationEvent, error) {
	ev := &InstallationEvent{}
	if err := json.Unmarshal(body, ev); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrPayload, err.Error())
	}
	if ev.Action == "" {
		return nil, fmt.Errorf("%w: action is missing", ErrPayload)
	}
	if ev.Installation.ID <= 0 {
		return nil, fmt.Errorf("%w: installation.id is missing", ErrPayload)
	}
	if !validRepoPart(ev.Installation.Account.Login) {
		return nil, fmt.Errorf("%w: installation.account.login %q is not an account name", ErrPayload, ev.Installation.Account.Login)
	}
	for _, list := range [][]Repository{ev.Repositories, ev.RepositoriesAdded, ev.RepositoriesRemoved} {
		for _, r := range list {
			if r.ID <= 0 {
				return nil, fmt.Errorf("%w: repository %q has no id", ErrPayload, r.FullName)
			}
			if _, _, err := splitRepo(r.FullName); err != nil {
				return nil, fmt.Errorf("%w: repository full_name %q is not owner/name", ErrPayload, r.FullName)
			}
		}
	}
	return ev, nil
}
