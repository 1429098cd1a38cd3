package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// CommitDefinitions is implemented by Definitions that can read the
// definitions of any commit, not only a channel's active one.
type CommitDefinitions interface {
	AtCommit(channel, branch, commit string) (JobCatalog, error)
}

// RunJob describes a run's job as the commit the run pinned defines it:
// description, owners, runbook and who may run it under that commit's
// policies. Like GetRun, it shows only runs of the actor's tenant, so only
// commits that tenant's runs were pinned to can be browsed this way.
func (s *Service) RunJob(ctx context.Context, actor principal.Actor, runID string) (*JobView, error) {
	v, err := s.GetRun(ctx, actor, runID)
	if err != nil {
		return nil, err
	}
	cd, ok := s.defs.(CommitDefinitions)
	if !ok {
		return nil, fmt.Errorf("definitions cannot be read at a commit: %w", protocol.ErrCatalogUnavailable)
	}
	r := v.Run
	cat, err := cd.AtCommit(r.Channel, r.Ref, r.Commit)
	if err != nil {
		return nil, protocol.Refused(protocol.ErrCatalogUnavailable, fmt.Errorf("definitions at %s: %w", short(r.Commit), err))
	}
	info, ok := cat.Describe(r.Job)
	if !ok {
		return nil, fmt.Errorf("no job %q at %s: %w", r.Job, short(r.Commit), protocol.ErrUnknownJob)
	}
	out := &JobView{Channel: r.Channel, Branch: r.Ref, Commit: r.Commit, JobInfo: info}
	out.MayRun, err = s.mayRun(ctx, actor, cat, r.Channel, r.Job)
	return out, err
}

// mayRun puts every principal the definitions name to the policies with
// the job's default parameters (as ShowJob does).
func (s *Service) mayRun(ctx context.Context, actor principal.Actor, cat JobCatalog, channel, name string) ([]PrincipalAccess, error) {
	params, err := cat.ValidateParams(name, json.RawMessage(`{}`))
	if err != nil {
		params = json.RawMessage(`{}`)
	}
	branch := cat.Branch()
	source, _ := json.Marshal(map[string]string{"kind": "api", "ref": branch, "commit": cat.Commit()})
	now := s.clock.Now()
	out := []PrincipalAccess{}
	for _, p := range cat.Principals() {
		kind := "user"
		if pr, err := s.store.PrincipalGetByName(ctx, actor.TenantID, p); err == nil {
			kind = pr.Kind
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, store.Refusal(err)
		}
		d := cat.Decide(DecisionRequest{Job: name, Channel: channel, Actor: p, ActorKind: kind, Params: params,
			Ref: Ref{Branch: branch, Protected: cat.Protected(), Commit: cat.Commit()}, Source: source, Now: now})
		if d.Allowed {
			out = append(out, PrincipalAccess{Principal: p, Rule: d.Rule, Approval: d.Approval})
		}
	}
	return out, nil
}
