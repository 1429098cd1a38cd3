package githubapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/failpoint"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Actor is the built-in service principal in whose name GitHub
// deliveries act.
const Actor = "github"

// Delivery is one webhook delivery whose signature has been verified.
type Delivery struct {
	ID    string // X-GitHub-Delivery
	Event string // X-GitHub-Event
	Body  []byte
}

// Outcome says what became of a delivery.
type Outcome string

// Delivery outcomes.
const (
	// Processed: the delivery's effects were committed with its record.
	Processed Outcome = "processed"
	// Duplicate: the delivery had been processed before; nothing changed.
	Duplicate Outcome = "duplicate"
	// Ignored: an event or action jobplane does not act on; nothing
	// was written, not even a record of the delivery.
	Ignored Outcome = "ignored"
)

// TenantName is the name of the tenant bound to an installation.
// Installation IDs are never reused by GitHub, and unlike account logins
// they cannot be renamed into a collision with another tenant.
func TenantName(installation int64) string {
	return "github-" + strconv.FormatInt(installation, 10)
}

// HandleDelivery processes a verified delivery exactly once. The
// delivery is recorded in the transaction that applies its effects, first,
// so that a concurrent copy waits for this one and then finds it recorded,
// and a delivery whose processing failed leaves no record and is processed
// again when GitHub redelivers it.
func (s *Service) HandleDelivery(ctx context.Context, d Delivery) (Outcome, error) {
	ctx = store.WithSystem(ctx, "github webhook") // cross-tenant by nature (docs/operations.md)
	if d.Event == "pull_request" {
		return s.handlePullRequest(ctx, d)
	}
	apply, action, installation, err := s.handler(d)
	if err != nil || apply == nil {
		return Ignored, err
	}
	outcome := Processed
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		outcome = Processed
		err := tx.GitHubDeliveryRecord(ctx, &store.GitHubDelivery{ID: d.ID, Event: d.Event, Action: action,
			InstallationID: installation, ProcessedAt: clock.NowOrZero(s.clock)})
		if errors.Is(err, store.ErrAlreadyExists) {
			outcome = Duplicate
			return nil
		}
		if err != nil {
			return fmt.Errorf("record delivery: %w", err)
		}
		if err := failpoint.Inject("github.delivery.afterRecord"); err != nil {
			return err
		}
		if err := apply(ctx, tx); err != nil {
			return err
		}
		return failpoint.Inject("github.delivery.beforeCommit")
	})
	if err != nil {
		return "", store.Refusal(err)
	}
	return outcome, nil
}

type applyFunc func(ctx context.Context, tx store.Tx) error

// handler parses a delivery and returns what to apply, or nil when
// the event or action is one jobplane does not act on.
func (s *Service) handler(d Delivery) (apply applyFunc, action string, installation int64, err error) {
	var head struct {
		Action string `json:"action"`
	}
	// Only the action is read before deciding whether to act: an event
	// jobplane ignores is not held to the shape of one it handles.
	_ = json.Unmarshal(d.Body, &head)
	var status string
	switch d.Event + "." + head.Action {
	case "installation.created", "installation.unsuspend":
		status = store.GitHubInstallationActive
	case "installation.suspend":
		status = store.GitHubInstallationSuspended
	case "installation.deleted":
		status = store.GitHubInstallationDeleted
	case "installation_repositories.added", "installation_repositories.removed":
	default:
		return nil, "", 0, nil
	}
	ev, err := github.ParseInstallationEvent(d.Body)
	if err != nil {
		return nil, "", 0, protocol.Refused(protocol.ErrWebhookDeliveryInvalid, fmt.Errorf("%s delivery %s: %w", d.Event, d.ID, err))
	}
	return func(ctx context.Context, tx store.Tx) error {
		return s.applyInstallationEvent(ctx, tx, d, ev, status)
	}, ev.Action, ev.Installation.ID, nil
}

// applyInstallationEvent maintains the tenant ↔ installation binding and
// the installation's repositories. status is the installation's new status,
// or "" to keep it.
func (s *Service) applyInstallationEvent(ctx context.Context, tx store.Tx, d Delivery, ev *github.InstallationEvent, status string) error {
	in, err := tx.GitHubInstallationGet(ctx, ev.Installation.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// The first event seen may not be "created" (a lost delivery, or an
		// App installed before jobplane was): bind the installation now.
		tn, err := tx.TenantEnsure(ctx, TenantName(ev.Installation.ID), s.clock.NowOrNil())
		if err != nil {
			return fmt.Errorf("ensure tenant: %w", err)
		}
		in = &store.GitHubInstallation{ID: ev.Installation.ID, Tenant: tn.ID, Status: store.GitHubInstallationActive}
	case err != nil:
		return err
	}
	if in.Status == store.GitHubInstallationDeleted {
		// GitHub never reuses an installation ID: a late copy of an older
		// event must not revive a deleted installation.
		return s.audit(ctx, tx, in.Tenant, Actor, "github."+d.Event+".ignored", githubSubject(in.ID),
			map[string]any{"delivery": d.ID, "action": ev.Action, "reason": "installation deleted"})
	}
	prev := in.Status
	if status != "" {
		in.Status = status
	}
	in.Account = ev.Installation.Account.Login
	in.AccountType = ev.Installation.Account.Type
	if sel := firstNonEmpty(ev.RepositorySelection, ev.Installation.RepositorySelection); sel != "" {
		in.RepositorySelection = sel
	}
	in.UpdatedAt = clock.NowOrZero(s.clock)
	if err := tx.GitHubInstallationPut(ctx, in); err != nil {
		return fmt.Errorf("bind installation: %w", err)
	}

	added, removed := ev.RepositoriesAdded, ev.RepositoriesRemoved
	switch {
	case d.Event == "installation" && ev.Action == "created":
		// The payload lists every granted repository: it replaces the set.
		current, err := tx.GitHubRepoList(ctx, in.ID)
		if err != nil {
			return err
		}
		keep := map[int64]bool{}
		for _, r := range ev.Repositories {
			keep[r.ID] = true
		}
		for _, r := range current {
			if !keep[r.RepoID] {
				removed = append(removed, github.Repository{ID: r.RepoID, FullName: r.FullName})
			}
		}
		added = ev.Repositories
	case status == store.GitHubInstallationDeleted:
		current, err := tx.GitHubRepoList(ctx, in.ID)
		if err != nil {
			return err
		}
		for _, r := range current {
			removed = append(removed, github.Repository{ID: r.RepoID, FullName: r.FullName})
		}
	}
	for _, r := range added {
		if err := tx.GitHubRepoPut(ctx, &store.GitHubRepo{InstallationID: in.ID, RepoID: r.ID, FullName: r.FullName,
			Private: r.Private, AddedAt: clock.NowOrZero(s.clock)}); err != nil {
			return fmt.Errorf("add repository %s: %w", r.FullName, err)
		}
	}
	for _, r := range removed {
		if err := tx.GitHubRepoDelete(ctx, in.ID, r.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("remove repository %s: %w", r.FullName, err)
		}
	}
	details := map[string]any{
		"delivery": d.ID, "account": in.Account, "status": in.Status, "previous_status": prev,
		"repositories_added": repoNames(added), "repositories_removed": repoNames(removed), "sender": ev.Sender.Login,
	}
	// Runs of repositories the installation no longer grants cannot fetch
	// their source nor report back: end them with the loss.
	var lost map[string]bool
	reason := ""
	switch {
	case in.Status == store.GitHubInstallationDeleted:
		reason = "GitHub installation " + strconv.FormatInt(in.ID, 10) + " was deleted"
	case len(removed) > 0:
		lost = map[string]bool{}
		for _, r := range removed {
			lost[strings.ToLower(r.FullName)] = true
		}
		reason = "GitHub installation " + strconv.FormatInt(in.ID, 10) + " no longer grants " + strings.Join(repoNames(removed), ", ")
	}
	if reason != "" {
		ended, err := s.endLostRuns(ctx, tx, in, lost, reason)
		if err != nil {
			return err
		}
		details["runs_cancelled"], details["runs_stopping"] = ended.Cancelled, ended.Stopping
	}
	return s.audit(ctx, tx, in.Tenant, Actor, "github."+d.Event+"."+ev.Action, githubSubject(in.ID), details)
}

func githubSubject(installation int64) string {
	return "github-installation:" + strconv.FormatInt(installation, 10)
}

func repoNames(rs []github.Repository) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.FullName)
	}
	return out
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// DeliveryRetention is how long processed deliveries are remembered.
// GitHub lets a delivery be redelivered for three days; a week leaves
// margin for a redelivery of an old delivery by hand.
const DeliveryRetention = 7 * 24 * time.Hour

// PurgeDeliveries forgets deliveries processed before the retention.
func (s *Service) PurgeDeliveries(ctx context.Context) (int, error) {
	ctx = store.WithSystem(ctx, "github delivery purge") // cross-tenant by nature (docs/operations.md)
	var n int
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		n, err = tx.GitHubDeliveryPurge(ctx, now.Add(-DeliveryRetention))
		return err
	})
	return n, err
}
