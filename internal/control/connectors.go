package control

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// IssueConnectors hands a running job the credentials of the connectors its
// job declares, each at the level the run was granted: write only when the
// job declares write and both the run's decision and its token grant it,
// read otherwise. The caller has proven, with its run token, that its
// attempt is live.
func (s *Service) IssueConnectors(ctx context.Context, c *RunCaller) (*protocol.RunConnectors, error) {
	out := &protocol.RunConnectors{Env: map[string]string{}, Mask: []string{}}
	spec, err := runSpec(c.Run)
	if err != nil {
		return nil, err
	}
	if len(spec.Connectors) == 0 {
		return out, nil
	}
	if s.broker == nil {
		return nil, fmt.Errorf("connectors are not configured on this server: %w", protocol.ErrUnavailable)
	}
	var grants map[string]string
	if len(c.Run.Grants) > 0 {
		if err := json.Unmarshal(c.Run.Grants, &grants); err != nil {
			return nil, fmt.Errorf("decode grants of run %s: %w", c.Run.ID, err)
		}
	}
	req := connector.Request{Tenant: c.Run.Tenant, RunID: c.Run.ID, AttemptID: c.Attempt.ID, Channel: c.Run.Channel,
		Connectors: map[string]connector.Use{}}
	if c.Attempt.Deadline != nil {
		req.Deadline = *c.Attempt.Deadline
	}
	levels := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(spec.Connectors)) {
		sc := spec.Connectors[name]
		if sc.Def == nil {
			return nil, fmt.Errorf("connector %s has no definition at commit %s: %w", name, short(c.Run.Commit), protocol.ErrUnavailable)
		}
		granted := grants[name]
		if string(c.Claims.Grants[name]) != connector.LevelWrite {
			granted = connector.LevelRead // the token never widens the run's grants
		}
		lvl := connector.Level(sc.Declared, granted)
		levels[name] = lvl
		req.Connectors[name] = connector.Use{Def: sc.Def, Level: lvl}
	}
	issued, err := s.broker.Issue(ctx, req)
	if err != nil {
		return nil, protocol.Refused(protocol.ErrUnavailable, fmt.Errorf("issue connectors: %w", err))
	}
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		return s.audit(ctx, tx, c.Run.Tenant, "run:"+c.Run.ID, "connector.issued", c.Run.ID,
			map[string]any{"attempt": c.Attempt.ID, "connectors": levels})
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	out.Env = issued.Env
	out.Mask = issued.Secrets
	return out, nil
}

// RevokeCredentials revokes what was minted for attempts that have ended
// (or whose lease ran out): it runs with the reaper.
func (s *Service) RevokeCredentials(ctx context.Context) (int, error) {
	ctx = store.WithSystem(ctx, "credential revocation") // cross-tenant by nature (docs/operations.md)
	if s.broker == nil {
		return 0, nil
	}
	return s.broker.Revoke(ctx, s.clock.NowOrNil(), s.batch)
}
