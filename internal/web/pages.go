package web

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/jobplane/jobplane/internal/admin"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

func (h *Handler) routesPages(m *http.ServeMux) {
	m.HandleFunc("GET /request", h.user(h.requestForm))
	h.post(m, "/request", h.requestSubmit)
	m.HandleFunc("GET /approvals", h.user(h.approvals))
	m.HandleFunc("GET /leases", h.user(h.leases))
	h.post(m, "/leases/release", h.releaseLease)
	m.HandleFunc("GET /catalog", h.user(h.catalog))
	m.HandleFunc("GET /catalog/{channel}/{job}", h.user(h.job))
	m.HandleFunc("GET /runs/{id}/job", h.user(h.runJob))
	m.HandleFunc("GET /runners", h.user(h.runners))
	h.post(m, "/runners/{id}/disable", h.setRunner(store.RunnerDisabled))
	h.post(m, "/runners/{id}/enable", h.setRunner(store.RunnerActive))
	m.HandleFunc("GET /audit", h.user(h.audit))
	m.HandleFunc("GET /audit/chain", h.user(h.auditChain))
}

// ---- approvals ----

type approvalItem struct {
	Run      *store.Run
	Params   string
	Rule     string
	Approval *protocol.ApprovalRequirement
	Given    int
}

type approvalsData struct {
	Items []approvalItem
	CSRF  string
}

// approvals lists the runs waiting for this principal's verdict: runs
// pending approval whose approvers include the principal, not requested by
// it, without its verdict yet.
func (h *Handler) approvals(w http.ResponseWriter, r *http.Request, s *session) {
	d := approvalsData{CSRF: s.CSRF}
	before := ""
	for {
		views, next, err := h.svc.ListRuns(r.Context(), s.Actor, store.RunListParams{State: string(store.RunPendingApproval), Before: before, Limit: 500})
		if err != nil {
			h.renderError(w, r, s, err)
			return
		}
		for _, v := range views {
			var dec protocol.DecisionRecord
			_ = json.Unmarshal(v.Run.Decision, &dec)
			if ok, _ := mayApprove(s.Actor, v.Run, dec, v.Approvals); !ok {
				continue
			}
			given := 0
			for _, a := range v.Approvals {
				if a.Verdict == control.VerdictApproved {
					given++
				}
			}
			d.Items = append(d.Items, approvalItem{Run: v.Run, Params: pretty(v.Run.Params), Rule: dec.Request.Rule, Approval: dec.Request.Approval, Given: given})
		}
		if next == "" {
			break
		}
		before = next
	}
	h.render(w, r, http.StatusOK, "approvals", view{Title: "Approvals", Nav: "approvals", Sess: s, Notice: r.URL.Query().Get("notice"), Data: d})
}

// ---- leases ----

type leasesData struct {
	Keys []*protocol.LeaseView
	CSRF string
	// Problem is a refused break-glass release, shown above the table.
	Problem *problem
}

func (h *Handler) leaseData(r *http.Request, s *session) (*leasesData, error) {
	holds, err := h.lease.List(r.Context(), s.Actor, "")
	if err != nil {
		return nil, err
	}
	d := &leasesData{CSRF: s.CSRF}
	var keys []string
	for _, hv := range holds {
		keys = append(keys, hv.Key)
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		lv, err := h.lease.Show(r.Context(), s.Actor, k)
		if err != nil {
			return nil, err
		}
		d.Keys = append(d.Keys, lv)
	}
	return d, nil
}

func (h *Handler) leases(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.leaseData(r, s)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	h.render(w, r, http.StatusOK, "leases", view{Title: "Leases", Nav: "leases", Sess: s, Notice: r.URL.Query().Get("notice"), Data: d})
}

func (h *Handler) releaseLease(w http.ResponseWriter, r *http.Request, s *session) {
	key := r.PostFormValue("key")
	if _, err := h.lease.ForceRelease(r.Context(), s.Actor, key, r.PostFormValue("reason")); err != nil {
		d, derr := h.leaseData(r, s)
		if derr != nil {
			h.renderError(w, r, s, err)
			return
		}
		p := toProblem(h.log, err)
		d.Problem = &p
		h.render(w, r, p.Status, "leases", view{Title: "Leases", Nav: "leases", Sess: s, Data: d})
		return
	}
	http.Redirect(w, r, "/leases?notice="+url.QueryEscape("released "+key), http.StatusSeeOther)
}

// ---- catalog ----

type catalogChannel struct {
	protocol.ChannelView
	Jobs  []protocol.JobInfo
	Error string
}

type catalogData struct {
	Channels []catalogChannel
}

func (h *Handler) catalog(w http.ResponseWriter, r *http.Request, s *session) {
	cv, err := h.cats.Catalogs(r.Context(), s.Actor)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	var d catalogData
	for _, c := range cv.Channels {
		cc := catalogChannel{ChannelView: c}
		// A branch is named only for pattern channels, which need one.
		jv, err := h.cats.ListJobs(r.Context(), s.Actor, c.Channel, "")
		if err != nil {
			jv, err = h.cats.ListJobs(r.Context(), s.Actor, c.Channel, c.Branch)
		}
		if err == nil {
			cc.Jobs = jv.Jobs
		} else {
			cc.Error = toProblem(h.log, err).Detail
		}
		d.Channels = append(d.Channels, cc)
	}
	h.render(w, r, http.StatusOK, "catalog", view{Title: "Catalog", Nav: "catalog", Sess: s, Data: d})
}

type jobData struct {
	Job     *protocol.JobView
	Runbook template.HTML
	Params  string
	Leases  string
	Fields  []*field
	// RunID is set when the page shows the commit a run pinned.
	RunID string
}

func (h *Handler) job(w http.ResponseWriter, r *http.Request, s *session) {
	jv, err := h.cats.ShowJob(r.Context(), s.Actor, r.PathValue("channel"), r.URL.Query().Get("ref"), r.PathValue("job"))
	h.renderJob(w, r, s, jv, "", err)
}

// runJob is the job as the commit a run pinned defines it.
func (h *Handler) runJob(w http.ResponseWriter, r *http.Request, s *session) {
	jv, err := h.cats.RunJob(r.Context(), s.Actor, r.PathValue("id"))
	h.renderJob(w, r, s, jv, r.PathValue("id"), err)
}

func (h *Handler) renderJob(w http.ResponseWriter, r *http.Request, s *session, jv *protocol.JobView, runID string, err error) {
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	d := jobData{Job: jv, Runbook: renderMarkdown(jv.RunbookMarkdown), RunID: runID}
	var def struct {
		Params json.RawMessage `json:"params"`
		Leases json.RawMessage `json:"leases"`
	}
	_ = json.Unmarshal(jv.Definition, &def)
	d.Params, d.Leases = pretty(def.Params), pretty(def.Leases)
	d.Fields, _ = schemaFields(jv.Definition) // the raw schema is shown too
	h.render(w, r, http.StatusOK, "job", view{Title: jv.Name, Nav: "catalog", Sess: s, Data: d})
}

// ---- runners ----

type runnersData struct {
	Runners []admin.RunnerView
	Now     time.Time
	CSRF    string
}

func (h *Handler) runners(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.Actor.Admin {
		h.renderError(w, r, s, errNotAdmin("The runners page"))
		return
	}
	rs, err := h.admin.ListRunners(r.Context(), s.Actor)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	slices.SortFunc(rs, func(a, b admin.RunnerView) int {
		if c := compareStr(a.Runner.Pool, b.Runner.Pool); c != 0 {
			return c
		}
		return compareStr(a.Runner.Name, b.Runner.Name)
	})
	h.render(w, r, http.StatusOK, "runners", view{Title: "Runners", Nav: "runners", Sess: s, Notice: r.URL.Query().Get("notice"),
		Data: runnersData{Runners: rs, Now: h.clock.Now(), CSRF: s.CSRF}})
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (h *Handler) setRunner(status string) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		rn, err := h.svc.SetRunnerStatus(r.Context(), s.Actor, r.PathValue("id"), status)
		if err != nil {
			h.renderError(w, r, s, err)
			return
		}
		http.Redirect(w, r, "/runners?notice="+url.QueryEscape(rn.Name+" is "+rn.Status), http.StatusSeeOther)
	}
}

// ---- audit ----

// auditData is the audit page: newest first, OlderLink continuing below
// the last event shown, NewestLink (on an older page) back to the newest
// events with the same filters.
type auditData struct {
	Filter     auditForm
	Events     []*store.AuditEvent
	OlderLink  string
	NewestLink string
}

type auditForm struct {
	Run, Actor, Action, Since, Until string
}

// timeLayout is what <input type="datetime-local"> sends; times are UTC.
const timeLayout = "2006-01-02T15:04"

func (h *Handler) audit(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.Actor.Admin {
		h.renderError(w, r, s, errNotAdmin("The audit log"))
		return
	}
	q := r.URL.Query()
	form := auditForm{Run: q.Get("run"), Actor: q.Get("actor"), Action: q.Get("action"), Since: q.Get("since"), Until: q.Get("until")}
	f := audit.Filter{RunID: form.Run, Actor: form.Actor, Action: form.Action, Newest: true, Limit: 100}
	var err error
	if f.Before, err = optInt(q.Get("before")); err != nil {
		h.renderError(w, r, s, err)
		return
	}
	for _, t := range []struct {
		in  string
		out *time.Time
	}{{form.Since, &f.Since}, {form.Until, &f.Until}} {
		if t.in == "" {
			continue
		}
		v, perr := time.Parse(timeLayout, t.in)
		if perr != nil {
			h.renderError(w, r, s, fmt.Errorf("time %q is not YYYY-MM-DDTHH:MM: %w", t.in, protocol.ErrBadRequest))
			return
		}
		*t.out = v
	}
	events, next, err := h.auditLog.Search(r.Context(), s.Actor, f)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	d := auditData{Filter: form, Events: events}
	nq := url.Values{}
	for k, v := range map[string]string{"run": form.Run, "actor": form.Actor, "action": form.Action, "since": form.Since, "until": form.Until} {
		if v != "" {
			nq.Set(k, v)
		}
	}
	if f.Before != 0 {
		d.NewestLink = "/audit?" + nq.Encode()
	}
	if next != 0 {
		nq.Set("before", strconv.FormatInt(next, 10))
		d.OlderLink = "/audit?" + nq.Encode()
	}
	h.render(w, r, http.StatusOK, "audit", view{Title: "Audit", Nav: "audit", Sess: s, Data: d})
}

func optInt(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a non-negative integer: %w", v, protocol.ErrBadRequest)
	}
	return n, nil
}

// auditChain verifies the audit hash chain and shows the outcome; the audit
// page loads it after the page itself, since it reads the whole chain.
func (h *Handler) auditChain(w http.ResponseWriter, r *http.Request, s *session) {
	rep, err := h.auditLog.Verify(r.Context(), s.Actor, nil)
	if err != nil {
		p := toProblem(h.log, err)
		h.renderTemplate(w, p.Status, "audit", "chain", chainData{Error: p.Detail})
		return
	}
	h.renderTemplate(w, http.StatusOK, "audit", "chain", chainData{Report: rep})
}

type chainData struct {
	Report *audit.Report
	Error  string
}
