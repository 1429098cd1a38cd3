package control

import (
	"context"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/store"
)

// AuditFilter narrows an audit search. Empty fields match everything.
type AuditFilter struct {
	After  int64  // sequence cursor
	RunID  string // subject
	Actor  string
	Action string // exact action, or a prefix ending in "." ("run.")
	Since  time.Time
	Until  time.Time
	Limit  int
}

// auditScanBudget bounds how many events one search reads, so that a filter
// matching nothing cannot make a page read the whole log.
const auditScanBudget = 20000

// SearchAudit lists the tenant's audit events matching f in sequence order
// (admin). Subject, actor and start time are store filters; action and end
// time are applied while paging, within a budget of events read. next is the cursor
// to continue from (0 when the log is exhausted).
func (s *Service) SearchAudit(ctx context.Context, actor principal.Actor, f AuditFilter) (events []*store.AuditEvent, next int64, err error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, 0, err
	}
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	after, read := f.After, 0
	for read < auditScanBudget {
		page, err := s.store.AuditList(ctx, &store.AuditListParams{Tenant: actor.TenantID, After: after, RunID: f.RunID,
			Actor: f.Actor, Since: f.Since, Limit: 1000})
		if err != nil {
			return nil, 0, store.Refusal(err)
		}
		for _, ev := range page {
			after = ev.Seq
			read++
			if f.matches(ev) {
				events = append(events, ev)
				if len(events) == f.Limit {
					return events, after, nil
				}
			}
		}
		if len(page) < 1000 {
			return events, 0, nil
		}
	}
	return events, after, nil
}

func (f AuditFilter) matches(ev *store.AuditEvent) bool {
	if f.Actor != "" && ev.Actor != f.Actor {
		return false
	}
	if f.Action != "" {
		if strings.HasSuffix(f.Action, ".") {
			if !strings.HasPrefix(ev.Action, f.Action) {
				return false
			}
		} else if ev.Action != f.Action {
			return false
		}
	}
	if !f.Since.IsZero() && ev.At.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !ev.At.Before(f.Until) {
		return false
	}
	return true
}
