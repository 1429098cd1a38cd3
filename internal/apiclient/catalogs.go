package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"github.com/jobplane/jobplane/internal/protocol"
)

// Catalogs shows each channel's active commit and its rejected commits
// (GET /v1/catalogs).
func (c *Client) Catalogs(ctx context.Context) (*protocol.CatalogsView, error) {
	var out protocol.CatalogsView
	if err := c.do(ctx, http.MethodGet, nil, nil, &out, "v1", "catalogs"); err != nil {
		return nil, err
	}
	return &out, nil
}

// SyncCatalogs fetches the definitions repository now and answers the
// catalogs as they are then (POST /v1/catalogs/sync, admin).
func (c *Client) SyncCatalogs(ctx context.Context) (*protocol.CatalogsView, error) {
	var out protocol.CatalogsView
	if err := c.do(ctx, http.MethodPost, nil, nil, &out, "v1", "catalogs", "sync"); err != nil {
		return nil, err
	}
	return &out, nil
}

// Jobs lists the jobs of a channel's active commit (GET /v1/jobs); an empty
// channel is the server's only one, ref names the branch of a pattern
// channel.
func (c *Client) Jobs(ctx context.Context, channel, ref string) (*protocol.JobsView, error) {
	var out protocol.JobsView
	if err := c.do(ctx, http.MethodGet, channelQuery(channel, ref), nil, &out, "v1", "jobs"); err != nil {
		return nil, err
	}
	return &out, nil
}

// Job shows one job of a channel (GET /v1/jobs/{name}).
func (c *Client) Job(ctx context.Context, name, channel, ref string) (*protocol.JobView, error) {
	var out protocol.JobView
	if err := c.do(ctx, http.MethodGet, channelQuery(channel, ref), nil, &out, "v1", "jobs", name); err != nil {
		return nil, err
	}
	return &out, nil
}

// Schedules lists the jobs' schedules with their next firings
// (GET /v1/schedules).
func (c *Client) Schedules(ctx context.Context) (*protocol.SchedulesView, error) {
	var out protocol.SchedulesView
	if err := c.do(ctx, http.MethodGet, nil, nil, &out, "v1", "schedules"); err != nil {
		return nil, err
	}
	return &out, nil
}

func channelQuery(channel, ref string) url.Values {
	q := url.Values{}
	if channel != "" {
		q.Set("channel", channel)
	}
	if ref != "" {
		q.Set("ref", ref)
	}
	return q
}
