package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/jobplane/jobplane/internal/admin"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/tracing"
)

func runJSON(v *control.RunView) protocol.Run {
	r := v.Run
	out := protocol.Run{
		ID: r.ID, State: string(r.State), Job: r.Job, Channel: r.Channel, Ref: r.Ref, Commit: r.Commit,
		Params: r.Params, Actor: r.Actor, Reason: r.Reason, Source: r.Source, Decision: r.Decision,
		Grants: r.Grants, LeaseKeys: r.LeaseKeys, WaitingFor: r.WaitingFor, CancelRequested: r.CancelRequested,
		Attempts: []protocol.Attempt{}, Approvals: []protocol.Approval{},
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), FinishedAt: utc(r.FinishedAt),
	}
	out.Timeline = timelineJSON(v.Timeline)
	for _, a := range v.Approvals {
		out.Approvals = append(out.Approvals, protocol.Approval{Approver: a.Approver, Verdict: a.Verdict, Comment: a.Comment, At: a.At.UTC()})
	}
	for _, a := range v.Attempts {
		out.Attempts = append(out.Attempts, protocol.Attempt{
			ID: a.ID, Number: a.Number, State: string(a.State), Runner: a.RunnerID, CreatedAt: a.CreatedAt.UTC(),
			ClaimedAt: utc(a.ClaimedAt), LeaseExpiresAt: utc(a.LeaseExpiresAt), Deadline: utc(a.Deadline),
			EndedAt: utc(a.EndedAt), Result: a.Result,
		})
	}
	return out
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func (h *Handler) createRun(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	var req protocol.RunRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	v, created, err := h.svc.RequestRun(r.Context(), actor, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	tracing.LinkRun(r.Context(), v.Run.ID)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, requestedRunAs(w, r)(v))
}

// requestedRunAs is how the routes that request runs answer with a run:
// whole (runJSON), or as protocol.RunBrief when the caller sent "Prefer:
// return=minimal", which it then tells the caller it honoured. A caller
// requesting a hundred runs at a time need not have each one's kilobyte of
// decision record and parameters encoded and sent back (about a third of
// the CPU per requested run in the benchmark's request phase, server and
// caller together).
func requestedRunAs(w http.ResponseWriter, r *http.Request) func(*control.RunView) any {
	if !prefersMinimal(r) {
		return func(v *control.RunView) any { return runJSON(v) }
	}
	applyMinimal(w)
	return func(v *control.RunView) any {
		return protocol.RunBrief{ID: v.Run.ID, State: string(v.Run.State), WaitingFor: v.Run.WaitingFor, CreatedAt: v.Run.CreatedAt.UTC()}
	}
}

// runAnswer is a protocol.RunAnswer whose run is in either of
// requestedRunAs's forms.
type runAnswer struct {
	Status int               `json:"status"`
	Run    any               `json:"run,omitempty"`
	Error  *protocol.Problem `json:"error,omitempty"`
}

func (h *Handler) createRuns(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	var req protocol.RunsRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	outs, err := h.svc.RequestRuns(r.Context(), actor, req.Runs)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	as := requestedRunAs(w, r)
	answers := make([]runAnswer, len(outs))
	for i, o := range outs {
		if o.Err != nil {
			p := problemOf(h.log, o.Err)
			answers[i] = runAnswer{Status: p.Status, Error: &p}
			continue
		}
		tracing.LinkRun(r.Context(), o.View.Run.ID)
		answers[i] = runAnswer{Status: http.StatusOK, Run: as(o.View)}
		if o.Created {
			answers[i].Status = http.StatusCreated
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Runs []runAnswer `json:"runs"`
	}{answers})
}

func (h *Handler) getRun(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	v, err := h.svc.GetRun(r.Context(), actor, r.PathValue("id"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, runJSON(v))
}

func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	q := r.URL.Query()
	limit, err := queryInt(r, "limit")
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	if st := q.Get("state"); st != "" && !slices.Contains(store.RunStates, store.RunState(st)) {
		writeError(w, h.log, &protocol.FieldError{Field: "state", Err: fmt.Errorf("state %q is not a run state; one of %v: %w", st, store.RunStates, protocol.ErrBadRequest)})
		return
	}
	runs, next, err := h.svc.ListRuns(r.Context(), actor, store.RunListParams{Job: q.Get("job"), State: q.Get("state"), Channel: q.Get("channel"), Actor: q.Get("actor"), Before: q.Get("cursor"), Limit: int(limit)})
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	out := protocol.RunList{Runs: []protocol.Run{}, NextCursor: next}
	for _, v := range runs {
		out.Runs = append(out.Runs, runJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	var req protocol.CommentRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	v, err := h.svc.CancelRun(r.Context(), actor, r.PathValue("id"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, runJSON(v))
}

func (h *Handler) verdict(approve bool) func(http.ResponseWriter, *http.Request, principal.Actor) {
	return func(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
		var req protocol.CommentRequest
		if err := readJSON(r, &req); err != nil {
			writeError(w, h.log, err)
			return
		}
		do := h.svc.Reject
		if approve {
			do = h.svc.Approve
		}
		v, err := do(r.Context(), actor, r.PathValue("id"), req.Comment)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		writeJSON(w, http.StatusOK, runJSON(v))
	}
}

func lineJSON(l *store.LogLine) protocol.RunLogLine {
	return protocol.RunLogLine{ID: l.ID, AttemptID: l.AttemptID, At: l.At.UTC(), Stream: l.Stream, Text: l.Text}
}

func (h *Handler) logs(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	after, err := queryInt(r, "after")
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		if n, err := strconv.ParseInt(last, 10, 64); err == nil && n > after {
			after = n
		}
	}
	runID := r.PathValue("id")
	if r.URL.Query().Get("follow") != "true" {
		lines, run, err := h.svc.Logs(r.Context(), actor, runID, after, 0)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		out := protocol.LogList{Lines: []protocol.RunLogLine{}, Next: after, RunState: string(run.State)}
		for _, l := range lines {
			out.Lines = append(out.Lines, lineJSON(l))
			out.Next = l.ID
		}
		out.Done = run.State.Terminal() && len(lines) == 0
		writeJSON(w, http.StatusOK, out)
		return
	}
	h.followLogs(w, r, actor, runID, after)
}

// followLogs streams lines as server-sent events until the run has ended and
// every line is sent. Each event's id is the line's cursor, so a client that
// reconnects with Last-Event-ID loses and repeats nothing.
func (h *Handler) followLogs(w http.ResponseWriter, r *http.Request, actor principal.Actor, runID string, after int64) {
	ctx := r.Context()
	// Check access before committing to a stream.
	if _, _, err := h.svc.Logs(ctx, actor, runID, after, 1); err != nil {
		writeError(w, h.log, err)
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		wake := h.svc.Wake()
		lines, run, err := h.svc.Logs(ctx, actor, runID, after, 0)
		if err != nil {
			return
		}
		for _, l := range lines {
			b, _ := json.Marshal(lineJSON(l))
			fmt.Fprintf(w, "id: %d\nevent: line\ndata: %s\n\n", l.ID, b)
			after = l.ID
		}
		if run.State.Terminal() && len(lines) == 0 {
			b, _ := json.Marshal(protocol.LogEnd{RunState: string(run.State)})
			fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
			if flusher != nil {
				flusher.Flush()
			}
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if len(lines) > 0 {
			continue // there may be more than one page
		}
		tick := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			tick.Stop()
			return
		case <-h.svc.Draining():
			// The server is stopping: the client resumes the stream
			// (Last-Event-ID) on another replica or after the restart.
			tick.Stop()
			return
		case <-wake:
		case <-tick.C:
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
		}
		tick.Stop()
	}
}

func (h *Handler) createPrincipal(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	var req protocol.PrincipalRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	p, err := h.admin.CreatePrincipal(r.Context(), actor, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, protocol.Principal{ID: p.ID, Tenant: p.Tenant, Name: p.Name, Kind: p.Kind, Admin: p.Admin, CreatedAt: p.CreatedAt.UTC()})
}

func (h *Handler) createToken(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	var req protocol.PrincipalTokenRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.admin.CreateToken(r.Context(), actor, r.PathValue("name"), req.TTLSeconds)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	if err := h.admin.RevokeToken(r.Context(), actor, r.PathValue("id")); err != nil {
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) createRegToken(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	var req protocol.RegistrationTokenRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.admin.CreateRegistrationToken(r.Context(), actor, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

func runnerJSON(v admin.RunnerView) protocol.Runner {
	rn := v.Runner
	return protocol.Runner{
		ID: rn.ID, Tenant: rn.Tenant, Pool: rn.Pool, Name: rn.Name, Labels: rn.Labels, Status: rn.Status,
		SelfHosted: rn.SelfHosted, KeyFingerprint: rn.KeyFingerprint, LastSeenAt: utc(rn.LastSeenAt),
		CreatedAt: rn.CreatedAt.UTC(), Attempts: v.Attempts, Executor: rn.Executor,
		Capabilities: protocol.Capabilities{Images: rn.Capabilities.Has(store.CapImages), Isolated: rn.Capabilities.Has(store.CapIsolated)},
	}
}

func (h *Handler) listRunners(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	rs, err := h.admin.ListRunners(r.Context(), actor)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	out := protocol.RunnerList{Runners: []protocol.Runner{}}
	for _, v := range rs {
		out.Runners = append(out.Runners, runnerJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) setRunnerStatus(status string) func(http.ResponseWriter, *http.Request, principal.Actor) {
	return func(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
		rn, err := h.svc.SetRunnerStatus(r.Context(), actor, r.PathValue("id"), status)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		writeJSON(w, http.StatusOK, runnerJSON(admin.RunnerView{Runner: rn, Attempts: []string{}}))
	}
}
