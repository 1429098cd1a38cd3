package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
)

// definitions adapts the Git source to the run service.
type definitions struct {
	src *gitsync.Source
}

// OpenDefinitions opens the definitions repository for the run service.
func OpenDefinitions(repo string, channels map[string]string) (control.Definitions, error) {
	src, err := gitsync.Open(repo, channels)
	if err != nil {
		return nil, err
	}
	return &definitions{src: src}, nil
}

func (d *definitions) Resolve(_ context.Context, channel, ref string) (control.Catalog, error) {
	if ref != "" {
		return nil, fmt.Errorf("ref is only accepted for pattern channels, and channel %s is not one: %w", channel, protocol.ErrBadRequest)
	}
	snap, err := d.src.Resolve(channel)
	if errors.Is(err, gitsync.ErrUnknownChannel) {
		return nil, fmt.Errorf("channel %q: %w", channel, protocol.ErrUnknownChannel)
	}
	if err != nil {
		return nil, fmt.Errorf("definitions of channel %s: %s: %w", channel, err.Error(), protocol.ErrCatalogUnavailable)
	}
	return &pinned{snap: snap}, nil
}

type pinned struct {
	snap *gitsync.Snapshot
}

func (p *pinned) Commit() string { return p.snap.Commit }
func (p *pinned) Branch() string { return p.snap.Branch }

// Protected: until protected branches are configurable, main is the one.
func (p *pinned) Protected() bool { return p.snap.Branch == "main" }

func (p *pinned) Job(name string) (control.Spec, bool) {
	j, ok := p.snap.Catalog.Job(name)
	if !ok {
		return control.Spec{}, false
	}
	labels := j.RunsOn.Labels
	if labels == nil {
		labels = []string{}
	}
	var conns map[string]control.SpecConnector
	for name, level := range j.Connectors {
		def, _ := p.snap.Catalog.Connector(name) // references are checked at parse
		if conns == nil {
			conns = map[string]control.SpecConnector{}
		}
		conns[name] = control.SpecConnector{Declared: level, Def: def}
	}
	return control.Spec{
		Connectors: conns,
		Name:       j.Name, Command: j.Run.Command, Env: j.Run.Env,
		Timeout: control.Duration(j.Run.Timeout), LeaseTTL: control.Duration(j.Run.LeaseTTL),
		Pool: j.RunsOn.Pool, Labels: labels,
		MaxAttempts: j.Retries.MaxAttempts, Backoff: control.Duration(j.Retries.Backoff),
	}, true
}

func (p *pinned) ValidateParams(job string, params json.RawMessage) (json.RawMessage, error) {
	j, ok := p.snap.Catalog.Job(job)
	if !ok {
		return nil, fmt.Errorf("no job %q: %w", job, protocol.ErrUnknownJob)
	}
	out, err := j.ValidateParams(params)
	var pe *catalog.ParamsError
	if errors.As(err, &pe) {
		return nil, &control.ParamsError{Field: pe.Field, Message: pe.Message}
	}
	return out, err
}

func (p *pinned) Decide(req control.DecisionRequest) control.Decision {
	in := catalog.Request{
		Job: req.Job, Channel: req.Channel, Actor: req.Actor, ActorKind: req.ActorKind,
		Ref: catalog.Ref{Branch: req.Ref.Branch, Protected: req.Ref.Protected, Commit: req.Ref.Commit},
		Now: req.Now,
	}
	// Params and source arrive as JSON objects; a value that is not one is
	// left out rather than guessed at (conditions over it then fail closed).
	_ = json.Unmarshal(req.Params, &in.Params)
	_ = json.Unmarshal(req.Source, &in.Source)
	d := p.snap.Catalog.Decide(in)
	detail, _ := json.Marshal(d)
	out := control.Decision{Allowed: d.Allowed, Rule: d.Rule, Explanation: d.Explanation, Grants: d.Grants, Detail: detail}
	if d.NeedsApproval != nil {
		out.Approval = &control.ApprovalRequirement{
			Count: d.NeedsApproval.Count, Groups: d.NeedsApproval.Groups,
			Approvers: p.members(d.NeedsApproval.Groups),
		}
	}
	return out
}

// members expands groups to the sorted, distinct names of their members.
func (p *pinned) members(groups []string) []string {
	var out []string
	for _, g := range groups {
		if grp, ok := p.snap.Catalog.Group(g); ok {
			out = append(out, grp.Members...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
