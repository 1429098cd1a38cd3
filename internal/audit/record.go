package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/failpoint"
	"github.com/jobplane/jobplane/internal/store"
)

// Appender is where an event is appended: the transaction of the change
// it records.
type Appender interface {
	AuditAppend(ctx context.Context, e *store.AuditEvent) error
}

// Recorder appends the events of a service's changes.
type Recorder struct {
	// Clock stamps events with its fake time in tests; with the real clock
	// the store stamps them with the database's.
	Clock clock.Clock
}

// Append appends one event in tx: who (actor) did what (action) to which
// subject in tenant, with details encoded as JSON (nil: none).
func (r Recorder) Append(ctx context.Context, tx Appender, tenant, actor, action, subject string, details any) error {
	var raw json.RawMessage
	if details != nil {
		b, err := json.Marshal(details)
		if err != nil {
			return err
		}
		raw = b
	}
	var at time.Time
	if r.Clock != nil {
		if n := r.Clock.NowOrNil(); n != nil {
			at = *n
		}
	}
	if err := tx.AuditAppend(ctx, Event(tenant, actor, action, subject, raw, at)); err != nil {
		return fmt.Errorf("append audit event: %w", err)
	}
	return failpoint.Inject("audit.afterInsertBeforeCommit")
}

// Event builds the row Append appends. Text is made valid UTF-8 here,
// once, so that what is stored is what is hashed (PostgreSQL would refuse
// invalid text; SQLite would keep bytes the canonical encoding cannot).
func Event(tenant, actor, action, subject string, details json.RawMessage, at time.Time) *store.AuditEvent {
	v := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
	return &store.AuditEvent{Tenant: v(tenant), Actor: v(actor), Action: v(action), Subject: v(subject), Details: details, At: at}
}
