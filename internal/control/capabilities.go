package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// attemptNeeds is what the runner of an attempt of r must be able to do.
func attemptNeeds(r *store.Run, spec Spec) store.Capabilities {
	return needsFor(spec, isolationReason(r, spec))
}

func needsFor(spec Spec, isolation string) store.Capabilities {
	var n store.Capabilities
	if imagesReason(spec) != "" {
		n |= store.CapImages
	}
	if isolation != "" {
		n |= store.CapIsolated
	}
	return n
}

// newAttempt is newAttempt with what the attempt needs decided by the
// service's rules (Config.IsolateWriteGrants).
func (s *Service) newAttempt(run *store.Run, spec Spec, number int, now, notBefore time.Time) *store.Attempt {
	a := newAttempt(run, spec, number, now, notBefore)
	a.Needs = needsFor(spec, s.isolationReason(run, spec))
	return a
}

// isolationReason is isolationReason by the service's rules.
func (s *Service) isolationReason(r *store.Run, spec Spec) string {
	why := isolationReason(r, spec)
	if !s.isolateWriteGrants && strings.HasPrefix(why, "connector ") {
		return ""
	}
	return why
}

// isolationReason says why r must run where its job cannot reach the
// runner's key ("" when it need not): a job that can act as its runner
// can claim other runs and take their run tokens and credentials, so a
// run that is untrusted (safe mode) must not get that chance, and a run
// holding something worth taking (a connector at write) must not sit on
// a runner whose other jobs could take it. A definition can ask for it
// too (isolation: required).
func isolationReason(r *store.Run, spec Spec) string {
	switch {
	case spec.SafeMode:
		return "safe mode: pull request from a fork"
	case spec.Isolation == "required":
		return "isolation: required"
	}
	if len(spec.Connectors) == 0 {
		return ""
	}
	var grants map[string]string
	if len(r.Grants) > 0 {
		if err := json.Unmarshal(r.Grants, &grants); err != nil {
			// Unreadable grants might give write: decide as if they did.
			return "grants unreadable"
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Connectors)) {
		if connector.Level(spec.Connectors[name].Declared, grants[name]) == connector.LevelWrite {
			return "connector " + name + " granted write"
		}
	}
	return ""
}

// imagesReason says why a run of spec needs a runner that runs images
// ("" when it need not): its image, or limits that only a container or a
// pod enforces. A process runner would run the job with them dropped.
func imagesReason(spec Spec) string {
	var why []string
	if spec.Image != "" {
		why = append(why, "run.image")
	}
	if spec.Resources != nil && (spec.Resources.CPUMillis != 0 || spec.Resources.MemoryBytes != 0) {
		why = append(why, "run.resources")
	}
	if spec.Network == "none" {
		why = append(why, "run.network: none")
	}
	return strings.Join(why, ", ")
}

// needsText names what an attempt needs of its runner's executor, for
// waiting_for; images is imagesReason's, reason isolationReason's.
func needsText(n store.Capabilities, images, reason string) []string {
	var out []string
	if n.Has(store.CapImages) {
		if images == "" {
			images = "run.image"
		}
		out = append(out, "a runner that can run images ("+images+")")
	}
	if n.Has(store.CapIsolated) {
		if reason == "" {
			out = append(out, "an isolated runner")
		} else {
			out = append(out, "an isolated runner ("+reason+")")
		}
	}
	return out
}

// restate records what a runner's heartbeat says of its executor when it
// differs from what the server knows: a worker restarted with another
// executor keeps its identity. The claims it makes afterwards see the new
// capabilities (the runner is re-read for every signed call).
func (s *Service) restate(ctx context.Context, call *principal.RunnerCall, executor string, caps store.Capabilities) error {
	if call.Runner.Executor == executor && call.Runner.Capabilities == caps {
		return nil
	}
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		rn, err := tx.RunnerGetByID(ctx, call.Runner.ID, true)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("runner %s is no longer registered: %w", call.Runner.ID, protocol.ErrRunnerDisabled)
		}
		if err != nil {
			return err
		}
		if rn.Executor == executor && rn.Capabilities == caps {
			return nil
		}
		before := rn.Capabilities.Protocol()
		rn.Executor, rn.Capabilities = executor, caps
		if err := tx.RunnerUpdate(ctx, rn); err != nil {
			return err
		}
		return s.audit(ctx, tx, rn.Tenant, "runner:"+rn.ID, "runner.executor_changed", rn.ID, map[string]any{
			"executor": executor, "capabilities": caps.Protocol(), "before": before,
		})
	})
	s.runnerLists.Invalidate()
	if err == nil {
		// Queued runs needing what it now states, or no longer states.
		s.watch.Mark(call.Runner.Tenant, call.Runner.Pool)
	}
	return store.Refusal(err)
}
