package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
)

func (h *Handler) routesAudit(m *routeMux) {
	m.HandleFunc("GET /v1/audit/verify", h.user(h.verifyAudit))
}

// listAudit pages the tenant's events: ?after=SEQ&limit=N&run=ID&actor=A&since=RFC3339.
func (h *Handler) listAudit(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	after, err := queryInt(r, "after")
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	q := audit.Query{After: after, Limit: int(limit), RunID: r.URL.Query().Get("run"), Actor: r.URL.Query().Get("actor")}
	if s := r.URL.Query().Get("since"); s != "" {
		if q.Since, err = time.Parse(time.RFC3339Nano, s); err != nil {
			writeError(w, h.log, fmt.Errorf("query since must be an RFC 3339 time such as 2026-08-14T00:00:00Z: %w", protocol.ErrBadRequest))
			return
		}
	}
	events, err := h.audit.Query(r.Context(), actor, q)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	out := protocol.AuditList{Events: []protocol.AuditEvent{}, Next: after}
	for _, e := range events {
		out.Events = append(out.Events, protocol.AuditEvent{Seq: e.Seq, At: e.At.UTC(), Actor: e.Actor, Action: e.Action,
			Subject: e.Subject, Details: e.Details, Hash: e.Hash, PrevHash: e.PrevHash})
		out.Next = e.Seq
	}
	writeJSON(w, http.StatusOK, out)
}

// verifyAudit recomputes the chain: ?checkpoint=SEQ:HASH also checks it
// against a head kept outside the database. A broken chain is still a 200:
// the answer is the report.
func (h *Handler) verifyAudit(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	var cp *audit.Checkpoint
	if s := r.URL.Query().Get("checkpoint"); s != "" {
		c, err := audit.ParseCheckpoint(s)
		if err != nil {
			writeError(w, h.log, protocol.Refused(protocol.ErrBadRequest, fmt.Errorf("query %w", err)))
			return
		}
		cp = &c
	}
	rep, err := h.audit.Verify(r.Context(), actor, cp)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	out := protocol.AuditVerify{OK: rep.OK, Sealed: rep.Sealed, Unsealed: rep.Unsealed,
		Head: protocol.AuditCheckpoint{Seq: rep.Head.Seq, Hash: rep.Head.Hash}}
	if cp != nil {
		out.Checkpoint = &protocol.AuditCheckpoint{Seq: cp.Seq, Hash: cp.Hash}
	}
	if rep.Broken != nil {
		out.Broken = &protocol.AuditBreak{Seq: rep.Broken.Seq, Reason: rep.Broken.Reason}
	}
	writeJSON(w, http.StatusOK, out)
}

func timelineJSON(tl []control.TimelineEntry) []protocol.TimelineEntry {
	if tl == nil {
		return nil
	}
	out := make([]protocol.TimelineEntry, 0, len(tl))
	for _, e := range tl {
		out = append(out, protocol.TimelineEntry{Seq: e.Seq, At: e.At.UTC(), Actor: e.Actor, Action: e.Action, State: e.State,
			Attempt: e.Attempt, Reason: e.Reason})
	}
	return out
}
