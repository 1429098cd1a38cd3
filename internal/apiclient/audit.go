package apiclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
)

// AuditQuery filters GET /v1/audit.
type AuditQuery struct {
	After int64
	Limit int
	RunID string
	Actor string
	Since time.Time
}

// AuditQuery reads one page of the tenant's audit events (admin); page on
// with After = the answer's Next until a page comes back empty.
func (c *Client) AuditQuery(ctx context.Context, q AuditQuery) (*protocol.AuditList, error) {
	v := url.Values{"after": {strconv.FormatInt(q.After, 10)}}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.RunID != "" {
		v.Set("run", q.RunID)
	}
	if q.Actor != "" {
		v.Set("actor", q.Actor)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	var out protocol.AuditList
	if err := c.do(ctx, http.MethodGet, v, nil, &out, "v1", "audit"); err != nil {
		return nil, err
	}
	return &out, nil
}

// AuditVerify recomputes the audit chain on the server (admin); checkpoint,
// "SEQ:HASH" or empty, is a head kept outside the database to check against.
func (c *Client) AuditVerify(ctx context.Context, checkpoint string) (*protocol.AuditVerify, error) {
	var v url.Values
	if checkpoint != "" {
		v = url.Values{"checkpoint": {checkpoint}}
	}
	var out protocol.AuditVerify
	if err := c.do(ctx, http.MethodGet, v, nil, &out, "v1", "audit", "verify"); err != nil {
		return nil, err
	}
	return &out, nil
}
