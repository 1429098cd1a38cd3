package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

func (h *Handler) routesRuns(m *http.ServeMux) {
	m.HandleFunc("GET /runs", h.user(h.runs))
	m.HandleFunc("GET /runs/rows", h.user(h.runRows))
	m.HandleFunc("GET /runs/{id}", h.user(h.run))
	m.HandleFunc("GET /runs/{id}/live", h.user(h.runLive))
	m.HandleFunc("GET /runs/{id}/head", h.user(h.runHead))
	m.HandleFunc("GET /runs/{id}/log/stream", h.user(h.logStream))
	h.post(m, "/runs/{id}/cancel", h.cancel)
	h.post(m, "/runs/{id}/approve", h.verdict(true))
	h.post(m, "/runs/{id}/reject", h.verdict(false))
}

// runStates are the states the filter offers.
var runStates = []store.RunState{store.RunPendingApproval, store.RunQueued, store.RunRunning, store.RunSucceeded,
	store.RunFailed, store.RunCancelled, store.RunTimedOut, store.RunDenied, store.RunRejected, store.RunExpired,
	store.RunSuperseded}

const runsPerPage = 50

type runsData struct {
	Filter   store.RunListParams
	States   []store.RunState
	Rows     []*store.Run
	Next     string // cursor of the next page, "" on the last
	Query    string // the filter as a query string, for the polling URL
	NextLink string
}

func (h *Handler) listRuns(r *http.Request, s *session) (*runsData, error) {
	q := r.URL.Query()
	f := store.RunListParams{Job: q.Get("job"), State: q.Get("state"), Channel: q.Get("channel"), Actor: q.Get("actor"), Before: q.Get("before"), Limit: runsPerPage}
	rows, next, err := h.svc.ListRunSummaries(r.Context(), s.Actor, f)
	if err != nil {
		return nil, err
	}
	d := &runsData{Filter: f, States: runStates, Rows: rows, Next: next}
	vals := url.Values{}
	for k, v := range map[string]string{"job": f.Job, "state": f.State, "channel": f.Channel, "actor": f.Actor, "before": f.Before} {
		if v != "" {
			vals.Set(k, v)
		}
	}
	d.Query = vals.Encode()
	if next != "" {
		vals.Set("before", next)
		d.NextLink = "/runs?" + vals.Encode()
	}
	return d, nil
}

func (h *Handler) runs(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.listRuns(r, s)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	h.render(w, r, http.StatusOK, "runs", view{Title: "Runs", Nav: "runs", Sess: s, Data: d})
}

// runRows is the table body the runs page polls for live states.
func (h *Handler) runRows(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.listRuns(r, s)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	h.renderTemplate(w, http.StatusOK, "runs", "rows", d)
}

// runData is the run page.
type runData struct {
	Run       *store.Run
	Attempts  []*store.Attempt
	Approvals []*store.Approval
	Decision  protocol.DecisionRecord
	Params    string
	Source    map[string]string
	Spec      string
	Leases    []runLease
	Timeline  []timelineEvent
	// History is the run's audit trail: every change, who made it, in
	// commit order.
	History    []control.TimelineEntry
	Artifacts  []protocol.Artifact
	CanCancel  bool
	CanApprove bool
	// ApproveNote says why the principal cannot approve, when the run waits.
	ApproveNote string
	Terminal    bool
	CSRF        string
	// FailureReason says in plain words why a run that did not succeed
	// ended as it did.
	FailureReason string
}

// runLease is one of a run's lease keys with this run's hold, if any.
type runLease struct {
	store.LeaseKey
	Holding *protocol.LeaseHolder
}

type timelineEvent struct {
	At     time.Time
	What   string
	Detail string
	// Took is the time since the previous event.
	Took time.Duration
}

func (h *Handler) runData(r *http.Request, s *session) (*runData, error) {
	v, err := h.svc.GetRun(r.Context(), s.Actor, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	run := v.Run
	d := &runData{Run: run, Attempts: v.Attempts, Approvals: v.Approvals, Terminal: run.State.Terminal(), CSRF: s.CSRF,
		Params: pretty(run.Params), Spec: pretty(run.Spec)}
	_ = json.Unmarshal(run.Decision, &d.Decision)
	_ = json.Unmarshal(run.Source, &d.Source)
	var keys []store.LeaseKey
	_ = json.Unmarshal(run.LeaseKeys, &keys)
	for _, k := range keys {
		l := runLease{LeaseKey: k}
		holders, err := h.lease.List(r.Context(), s.Actor, k.Key)
		if err != nil {
			return nil, err
		}
		for _, hv := range holders {
			if hv.Key == k.Key && hv.RunID == run.ID {
				l.Holding = &hv
			}
		}
		d.Leases = append(d.Leases, l)
	}
	d.Timeline = timeline(v)
	d.History = v.Timeline
	if h.arts != nil {
		if d.Artifacts, err = h.arts.RunArtifacts(r.Context(), s.Actor, run.ID); err != nil {
			return nil, err
		}
	}
	d.CanCancel = !d.Terminal && (run.Actor == s.Actor.Name || s.Actor.Admin)
	d.FailureReason = failureReason(run, v.Attempts)
	if run.State == store.RunPendingApproval {
		d.CanApprove, d.ApproveNote = mayApprove(s.Actor, run, d.Decision, v.Approvals)
	}
	return d, nil
}

// mayApprove mirrors control's approval checks so that the buttons show
// only where they would work; control still decides.
func mayApprove(a principal.Actor, run *store.Run, d protocol.DecisionRecord, apps []*store.Approval) (bool, string) {
	req := d.Request.Approval
	switch {
	case req == nil:
		return false, ""
	case run.Actor == a.Name:
		return false, "You requested this run, so you cannot approve it."
	case !slices.Contains(req.Approvers, a.Name):
		return false, fmt.Sprintf("Only members of %v may approve this run.", req.Groups)
	}
	for _, ap := range apps {
		if ap.Approver == a.Name {
			return false, "You already gave your verdict."
		}
	}
	return true, ""
}

// timeline orders what the run's rows record: the request, each verdict,
// and per attempt its queueing, claim, last renewal and end.
func timeline(v *control.RunView) []timelineEvent {
	var ev []timelineEvent
	run := v.Run
	ev = append(ev, timelineEvent{At: run.CreatedAt, What: "requested", Detail: "by " + run.Actor + " on " + run.Channel})
	for _, a := range v.Approvals {
		ev = append(ev, timelineEvent{At: a.At, What: a.Verdict, Detail: "by " + a.Approver})
	}
	for _, a := range v.Attempts {
		n := fmt.Sprintf("attempt %d ", a.Number)
		ev = append(ev, timelineEvent{At: a.CreatedAt, What: n + "queued", Detail: "pool " + a.Pool})
		if a.ClaimedAt != nil {
			ev = append(ev, timelineEvent{At: *a.ClaimedAt, What: n + "claimed", Detail: "by runner " + a.RunnerID})
		}
		if a.HeartbeatAt != nil && (a.ClaimedAt == nil || a.HeartbeatAt.After(*a.ClaimedAt)) {
			ev = append(ev, timelineEvent{At: *a.HeartbeatAt, What: n + "renewed", Detail: "last renewal"})
		}
		if a.EndedAt != nil {
			ev = append(ev, timelineEvent{At: *a.EndedAt, What: n + string(a.State), Detail: resultSummary(a.Result)})
		}
	}
	if run.FinishedAt != nil {
		ev = append(ev, timelineEvent{At: *run.FinishedAt, What: "run " + string(run.State)})
	}
	slices.SortStableFunc(ev, func(a, b timelineEvent) int { return a.At.Compare(b.At) })
	for i := 1; i < len(ev); i++ {
		ev[i].Took = ev[i].At.Sub(ev[i-1].At)
	}
	return ev
}

func resultSummary(raw json.RawMessage) string {
	var res struct {
		Outcome  string `json:"outcome"`
		ExitCode *int   `json:"exit_code"`
		Summary  string `json:"summary"`
		Reason   string `json:"reason"`
	}
	if json.Unmarshal(raw, &res) != nil {
		return ""
	}
	out := res.Outcome
	if res.ExitCode != nil {
		out += fmt.Sprintf(" (exit %d)", *res.ExitCode)
	}
	for _, s := range []string{res.Summary, res.Reason} {
		if s != "" {
			out += ": " + s
		}
	}
	return out
}

func pretty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		if len(raw) > prettyMaxBytes {
			return string(raw[:prettyMaxBytes]) + prettyTruncated
		}
		return string(raw)
	}
	var b strings.Builder
	writePretty(&b, v, 0)
	if b.Len() > prettyMaxBytes {
		out := b.String()[:prettyMaxBytes]
		for len(out) > 0 && !utf8.RuneStart(out[len(out)-1]) {
			out = out[:len(out)-1]
		}
		return strings.ToValidUTF8(out, "") + prettyTruncated
	}
	return b.String()
}

// A page shows a JSON value (a run's params, a definition's schema)
// indented to prettyMaxDepth levels, deeper levels compact, and at most
// prettyMaxBytes of it: indenting thousands of nested objects would make
// a page of tens of megabytes (the indentation grows with the square of
// the depth) from a request of a few kilobytes. The API has the whole
// value.
const (
	prettyMaxDepth  = 16
	prettyMaxBytes  = 64 << 10
	prettyTruncated = "\n… truncated: the whole value is in the API"
)

// writePretty writes v as json.MarshalIndent would, up to the bounds.
func writePretty(b *strings.Builder, v any, depth int) {
	if b.Len() > prettyMaxBytes {
		return
	}
	switch t := v.(type) {
	case map[string]any:
		if len(t) > 0 && depth < prettyMaxDepth {
			b.WriteString("{")
			for i, k := range slices.Sorted(maps.Keys(t)) {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString("\n" + strings.Repeat("  ", depth+1))
				kb, _ := json.Marshal(k)
				b.Write(kb)
				b.WriteString(": ")
				writePretty(b, t[k], depth+1)
				if b.Len() > prettyMaxBytes {
					return
				}
			}
			b.WriteString("\n" + strings.Repeat("  ", depth) + "}")
			return
		}
	case []any:
		if len(t) > 0 && depth < prettyMaxDepth {
			b.WriteString("[")
			for i, e := range t {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString("\n" + strings.Repeat("  ", depth+1))
				writePretty(b, e, depth+1)
				if b.Len() > prettyMaxBytes {
					return
				}
			}
			b.WriteString("\n" + strings.Repeat("  ", depth) + "]")
			return
		}
	}
	c, _ := json.Marshal(v)
	b.Write(c)
}

func (h *Handler) run(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.runData(r, s)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	h.render(w, r, http.StatusOK, "run", view{Title: "Run " + d.Run.ID, Nav: "runs", Sess: s, Notice: r.URL.Query().Get("notice"), Data: d})
}

// runLive is the part of the run page that changes; it polls itself until
// the run has ended.
func (h *Handler) runLive(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.runData(r, s)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	h.renderTemplate(w, http.StatusOK, "run", "live", d)
}

// runHead answers the run page's sticky header, refreshed while the run
// is live.
func (h *Handler) runHead(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.runData(r, s)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	h.renderTemplate(w, http.StatusOK, "run", "head", d)
}

// failureReason explains an ended run that did not succeed, from its state
// and its last attempt's result.
func failureReason(run *store.Run, attempts []*store.Attempt) string {
	var last *store.Attempt
	if len(attempts) > 0 {
		last = attempts[len(attempts)-1]
	}
	var res struct {
		ExitCode *int   `json:"exit_code"`
		Summary  string `json:"summary"`
	}
	if last != nil && len(last.Result) > 0 {
		_ = json.Unmarshal(last.Result, &res)
	}
	tries := ""
	if len(attempts) > 1 {
		tries = fmt.Sprintf(" (after %d attempts)", len(attempts))
	}
	switch run.State {
	case store.RunFailed:
		msg := "The job failed" + tries
		if res.ExitCode != nil && *res.ExitCode != 0 {
			msg += fmt.Sprintf(": its command exited with status %d", *res.ExitCode)
		}
		if res.Summary != "" && (res.ExitCode == nil || res.Summary != fmt.Sprintf("exit status %d", *res.ExitCode)) {
			msg += ": " + res.Summary
		}
		if last != nil && last.State == store.AttemptExpired {
			msg = "The runner stopped renewing its lease (it stopped, crashed or lost the server) and no attempt was left" + tries
		}
		return msg + ". The log below shows its last output."
	case store.RunTimedOut:
		return "The job ran longer than its timeout and was stopped" + tries + "."
	case store.RunExpired:
		return "No runner took or finished the run before it expired" + tries + "."
	case store.RunCancelled:
		return "The run was cancelled before it finished."
	case store.RunDenied:
		return "No policy rule allows this request; the decision below says which rules were considered."
	case store.RunRejected:
		return "An approver rejected the run, so it never ran."
	}
	return ""
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	if _, err := h.svc.CancelRun(r.Context(), s.Actor, id); err != nil {
		h.renderError(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(id)+"?notice=cancel+requested", http.StatusSeeOther)
}

func (h *Handler) verdict(approve bool) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		id := r.PathValue("id")
		do, notice := h.svc.Reject, "rejected"
		if approve {
			do, notice = h.svc.Approve, "approved"
		}
		if _, err := do(r.Context(), s.Actor, id, r.PostFormValue("comment")); err != nil {
			h.renderError(w, r, s, err)
			return
		}
		back := "/runs/" + url.PathEscape(id)
		if r.PostFormValue("from") == "approvals" {
			back = "/approvals"
		}
		http.Redirect(w, r, back+"?notice="+notice, http.StatusSeeOther)
	}
}

// logEvent is one line as the log stream sends it; the page inserts Text as
// text, never as markup.
type logEvent struct {
	ID     int64     `json:"id"`
	Stream string    `json:"stream"`
	Text   string    `json:"text"`
	At     time.Time `json:"at"`
}

// logStream sends a run's lines as server-sent events, each with its line
// cursor as the event id, until the run has ended and every line is sent.
// A reconnecting EventSource sends Last-Event-ID (and app.js, reopening a
// closed stream, sends after=): either way the stream resumes after the
// last line the page has, so nothing is lost or repeated.
func (h *Handler) logStream(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	runID := r.PathValue("id")
	var after int64
	for _, v := range []string{r.URL.Query().Get("after"), r.Header.Get("Last-Event-ID")} {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > after {
			after = n
		}
	}
	if _, _, err := h.svc.Logs(ctx, s.Actor, runID, after, 1); err != nil {
		p := toProblem(h.log, err)
		http.Error(w, p.Title, p.Status)
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	// Reconnect quickly after a dropped connection.
	fmt.Fprint(w, "retry: 1000\n\n")
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		wake := h.svc.Wake()
		lines, run, err := h.svc.Logs(ctx, s.Actor, runID, after, 0)
		if err != nil {
			return
		}
		for _, l := range lines {
			b, _ := json.Marshal(logEvent{ID: l.ID, Stream: l.Stream, Text: l.Text, At: l.At.UTC()})
			fmt.Fprintf(w, "id: %d\nevent: line\ndata: %s\n\n", l.ID, b)
			after = l.ID
		}
		if run.State.Terminal() && len(lines) == 0 {
			fmt.Fprintf(w, "event: end\ndata: %q\n\n", string(run.State))
			if flusher != nil {
				flusher.Flush()
			}
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if len(lines) > 0 {
			continue
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

// errNotAdmin explains pages only admins see.
func errNotAdmin(what string) error {
	return fmt.Errorf("%s is for admins: %w", what, protocol.ErrForbidden)
}
