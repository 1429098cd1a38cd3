package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/catalogs"
	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/schedule"
)

// definitions adapts the Git source to the run service and its catalog API
// (catalogs.Source).
type definitions struct {
	src *gitsync.Source
}

// OpenDefinitions opens the definitions repository for the run service, in
// place, with main as the protected branch.
var _ catalogs.Source = (*definitions)(nil)

func OpenDefinitions(repo string, channels map[string]string) (control.Definitions, error) {
	return OpenDefinitionsWith(repo, gitsync.Options{Channels: channels})
}

// OpenDefinitionsWith opens the definitions repository with all options:
// pattern channels, protected branches, and the mirror directory for URLs.
func OpenDefinitionsWith(repo string, opts gitsync.Options) (control.Definitions, error) {
	src, err := gitsync.Open(repo, opts)
	if err != nil {
		return nil, err
	}
	return &definitions{src: src}, nil
}

func (d *definitions) Resolve(_ context.Context, channel, ref string) (control.Catalog, error) {
	if ref != "" && !d.src.IsPattern(channel) {
		if _, ok := d.src.Channels()[channel]; ok {
			return nil, fmt.Errorf("ref is only accepted for pattern channels, and channel %s is not one: %w", channel, protocol.ErrBadRequest)
		}
	}
	snap, err := d.src.Resolve(channel, ref)
	switch {
	case errors.Is(err, gitsync.ErrUnknownChannel):
		return nil, fmt.Errorf("channel %q: %w", channel, protocol.ErrUnknownChannel)
	case errors.Is(err, gitsync.ErrRefRequired), errors.Is(err, gitsync.ErrRefNotAllowed):
		return nil, protocol.Refused(protocol.ErrBadRequest, err)
	case ref != "" && errors.Is(err, gitsync.ErrBranchNotFound):
		// The client named the branch: its absence is the client's error,
		// unlike a fixed channel's branch missing from the repository.
		return nil, &protocol.FieldError{Field: "ref", Err: protocol.Refused(protocol.ErrNotFound,
			fmt.Errorf("ref %q names no branch of the repository of pattern channel %s", ref, channel))}
	case err != nil:
		return nil, protocol.Refused(protocol.ErrCatalogUnavailable, fmt.Errorf("definitions of channel %s: %w", channel, err))
	}
	return &pinned{snap: snap, src: d.src}, nil
}

func (d *definitions) Channels() map[string]string     { return d.src.Channels() }
func (d *definitions) IsPattern(channel string) bool   { return d.src.IsPattern(channel) }
func (d *definitions) Sync(ctx context.Context) error  { return d.src.Sync(ctx) }
func (d *definitions) Seed(ch, branch, c string) error { return d.src.Seed(ch, branch, c) }

// Observe resolves every channel, and every existing branch of each pattern
// channel, in channel order.
func (d *definitions) Observe(_ context.Context) []catalogs.ChannelObservation {
	var out []catalogs.ChannelObservation
	channels := d.src.Channels()
	for _, ch := range slices.Sorted(maps.Keys(channels)) {
		branches, err := d.src.Branches(ch)
		if err != nil {
			out = append(out, catalogs.ChannelObservation{Channel: ch, Branch: channels[ch], Err: err.Error()})
			continue
		}
		for _, br := range branches {
			ref := ""
			if d.src.IsPattern(ch) {
				ref = br
			}
			o := catalogs.ChannelObservation{Channel: ch, Branch: br}
			snap, err := d.src.Resolve(ch, ref)
			var ce *gitsync.CatalogError
			switch {
			case err == nil:
				o.Head = snap.Head
				o.Active = &catalogs.CommitInfo{Commit: snap.Commit, Author: snap.Author, At: snap.CommittedAt}
			case errors.As(err, &ce):
				o.Head, o.Err = ce.Commit, "no commit of the branch validates"
			default:
				o.Err = err.Error()
			}
			for _, r := range d.src.Rejections(ch, br) {
				rc := catalogs.RejectedCommit{CommitInfo: catalogs.CommitInfo{Commit: r.Commit, Author: r.Author, At: r.At}, Errors: []protocol.CatalogError{}}
				for _, e := range r.Errors {
					rc.Errors = append(rc.Errors, protocol.CatalogError{File: e.File, Line: e.Line, Column: e.Column, Message: e.Message})
				}
				o.Rejected = append(o.Rejected, rc)
			}
			out = append(out, o)
		}
	}
	return out
}

type pinned struct {
	snap *gitsync.Snapshot
	src  *gitsync.Source
}

func (p *pinned) Commit() string { return p.snap.Commit }
func (p *pinned) Branch() string { return p.snap.Branch }

// Protected reports whether the branch is one of --protected.
func (p *pinned) Protected() bool { return p.snap.Protected }

func (p *pinned) Job(name string) (control.Spec, bool) {
	j, ok := p.snap.Catalog.Job(name)
	if !ok {
		return control.Spec{}, false
	}
	labels := j.RunsOn.Labels
	if labels == nil {
		labels = []string{}
	}
	var conns map[string]connector.Pinned
	for name, level := range j.Connectors {
		def, _ := p.snap.Catalog.Connector(name) // references are checked at parse
		if conns == nil {
			conns = map[string]connector.Pinned{}
		}
		conns[name] = connector.Pinned{Declared: level, Def: def}
	}
	var leases []lease.Template
	for _, l := range j.Leases {
		leases = append(leases, lease.Template{Key: l.Key, OnConflict: l.OnConflict, Limit: l.Limit, Once: l.Once})
	}
	var retention *control.SpecRetention
	if r := j.Retention; r != nil {
		retention = &control.SpecRetention{Logs: control.Duration(r.Logs), Artifacts: control.Duration(r.Artifacts)}
	}
	var resources *control.SpecResources
	if r := j.Run.Resources; r != nil {
		resources = &control.SpecResources{CPUMillis: r.CPUMillis, MemoryBytes: r.MemoryBytes}
	}
	isolation := ""
	if j.Isolation == catalog.IsolationRequired {
		isolation = j.Isolation
	}
	return control.Spec{
		Artifacts: specArtifacts(j), Source: specSource(j), Retention: retention,
		Image: j.Run.Image, Resources: resources, Network: j.Run.Network, Workdir: j.Run.Workdir,
		Isolation:  isolation,
		Leases:     leases,
		Connectors: conns,
		Name:       j.Name, Command: j.Run.Command, Env: j.Run.Env,
		Timeout: control.Duration(j.Run.Timeout), LeaseTTL: control.Duration(j.Run.LeaseTTL),
		Pool: j.RunsOn.Pool, Labels: labels,
		MaxAttempts: j.Retries.MaxAttempts, Backoff: control.Duration(j.Retries.Backoff),
		Workflow: j.Workflow,
	}, true
}

// Schedules lists the jobs with a schedule block (schedule.Catalog).
func (p *pinned) Schedules() []schedule.Job {
	var out []schedule.Job
	for _, j := range p.snap.Catalog.Jobs() {
		if s := j.Schedule; s != nil {
			out = append(out, schedule.Job{Job: j.Name, Cron: s.Cron, TZ: s.TZ, Channel: s.Channel, Params: s.Params, CatchUp: s.CatchUp})
		}
	}
	return out
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
	out := control.Decision{Allowed: d.Allowed, Rule: d.Rule, Explanation: d.Explanation, Grants: d.Grants, ForksFull: d.ForksFull, Detail: detail}
	if d.NeedsApproval != nil {
		out.Approval = &protocol.ApprovalRequirement{
			Count: d.NeedsApproval.Count, Groups: d.NeedsApproval.Groups,
			Approvers: p.snap.Catalog.Approvers(d.NeedsApproval.Groups),
		}
	}
	return out
}
