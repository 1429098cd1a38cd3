package audit

import (
	"context"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/store"
)

// LogStore is what the admin's reads of the audit log need of the store.
type LogStore interface {
	Reader
	AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEvent, error)
}

// Log is the admin's view of the audit log: query, search and verify.
type Log struct {
	store LogStore
}

// NewLog returns a Log over the store.
func NewLog(st LogStore) *Log { return &Log{store: st} }

// Query filters the audit log.
type Query struct {
	After int64
	RunID string
	Actor string
	Since time.Time
	Limit int
}

// Query reads the tenant's audit events in sequence order (admin).
func (s *Log) Query(ctx context.Context, actor principal.Actor, q Query) ([]*store.AuditEvent, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	if q.Limit <= 0 || q.Limit > 1000 {
		q.Limit = 100
	}
	ev, err := s.store.AuditList(ctx, &store.AuditListParams{Tenant: actor.TenantID, After: q.After, RunID: q.RunID,
		Actor: q.Actor, Since: q.Since, Limit: q.Limit})
	return ev, store.Refusal(err)
}

// Verify recomputes the whole hash chain (admin). The chain spans every
// tenant, so the report names only sequence numbers and hashes.
func (s *Log) Verify(ctx context.Context, actor principal.Actor, cp *Checkpoint) (*Report, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	rep, err := Verify(ctx, s.store, cp)
	return rep, store.Refusal(err)
}

// Filter narrows an audit search. Empty fields match everything.
type Filter struct {
	After  int64  // sequence cursor, oldest first
	Before int64  // sequence cursor, newest first (with Newest)
	Newest bool   // page backward from Before, newest first
	RunID  string // subject
	Actor  string
	Action string // exact action, or a prefix ending in "." ("run.")
	Since  time.Time
	Until  time.Time
	Limit  int
}

// scanBudget bounds how many events one search reads, so that a filter
// matching nothing cannot make a page read the whole log.
const scanBudget = 20000

// Search lists the tenant's audit events matching f in sequence order,
// or newest first with f.Newest (admin). Subject, actor and start time are
// store filters; action and end time are applied while paging, within a
// budget of events read. next is the cursor to continue from (After, or
// Before with f.Newest; 0 when the log is exhausted).
func (s *Log) Search(ctx context.Context, actor principal.Actor, f Filter) (events []*store.AuditEvent, next int64, err error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, 0, err
	}
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	p := &store.AuditListParams{Tenant: actor.TenantID, After: f.After, RunID: f.RunID, Actor: f.Actor, Since: f.Since, Limit: 1000}
	if f.Newest {
		p.After, p.Before, p.Desc = 0, f.Before, true
	}
	var cursor int64
	for read := 0; read < scanBudget; {
		page, err := s.store.AuditList(ctx, p)
		if err != nil {
			return nil, 0, store.Refusal(err)
		}
		for _, ev := range page {
			cursor = ev.Seq
			read++
			if f.matches(ev) {
				events = append(events, ev)
				if len(events) == f.Limit {
					return events, cursor, nil
				}
			}
		}
		if len(page) < 1000 {
			return events, 0, nil
		}
		if f.Newest {
			p.Before = cursor
		} else {
			p.After = cursor
		}
	}
	return events, cursor, nil
}

func (f Filter) matches(ev *store.AuditEvent) bool {
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
