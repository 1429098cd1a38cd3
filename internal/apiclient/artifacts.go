package apiclient

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/jobplane/jobplane/internal/protocol"
)

// RequestUpload asks for an upload capability for a declared artifact
// (POST /v1/runner/attempt/artifacts).
func (c *RunnerClient) RequestUpload(ctx context.Context, ref AttemptRef, req protocol.ArtifactRequest) (*protocol.ArtifactCapability, error) {
	var out protocol.ArtifactCapability
	if _, err := c.do(ctx, &ref, req, &out, "v1", "runner", "attempt", "artifacts"); err != nil {
		return nil, err
	}
	return &out, nil
}

// Upload sends the bytes of an artifact to its capability URL (PUT); size
// is sent as Content-Length. The capability is single use: a failed upload
// needs a new one.
func (c *RunnerClient) Upload(ctx context.Context, uploadURL string, body io.Reader, size int64) (*protocol.UploadResponse, error) {
	cur := c.Current()
	return upload(ctx, cur.HTTP, cur.URL, uploadURL, body, size)
}

// UploadTo is Upload for a job that obtained the capability with its run
// token (RunRequestUpload).
func (c *Client) UploadTo(ctx context.Context, uploadURL string, body io.Reader, size int64) (*protocol.UploadResponse, error) {
	return upload(ctx, c.HTTP, c.BaseURL, uploadURL, body, size)
}

func upload(ctx context.Context, hc *http.Client, base, uploadURL string, body io.Reader, size int64) (*protocol.UploadResponse, error) {
	u, err := resolve(base, uploadURL)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, io.NopCloser(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Accept", "application/json, application/problem+json")
	var out protocol.UploadResponse
	if _, err := send(hc, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Source asks for the attempt's source (POST /v1/runner/attempt/source): a
// ticket URL for a managed runner, or repository and commit only.
func (c *RunnerClient) Source(ctx context.Context, ref AttemptRef) (*protocol.SourceAnswer, error) {
	var out protocol.SourceAnswer
	if _, err := c.do(ctx, &ref, struct{}{}, &out, "v1", "runner", "attempt", "source"); err != nil {
		return nil, err
	}
	return &out, nil
}

// DownloadSource redeems a source ticket URL and returns the gzipped tar
// stream; the caller closes it.
func (c *RunnerClient) DownloadSource(ctx context.Context, ticketURL string) (io.ReadCloser, error) {
	cur := c.Current()
	return downloadSource(ctx, cur.HTTP, cur.URL, ticketURL)
}

// DownloadSourceFrom is DownloadSource for a job that obtained the ticket
// with its run token (RunSource).
func (c *Client) DownloadSourceFrom(ctx context.Context, ticketURL string) (io.ReadCloser, error) {
	return downloadSource(ctx, c.HTTP, c.BaseURL, ticketURL)
}

func downloadSource(ctx context.Context, hc *http.Client, base, ticketURL string) (io.ReadCloser, error) {
	u, err := resolve(base, ticketURL)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	return openStream(hc, req)
}

// RunSource asks, with the run token c.Token, for the source of the token's
// attempt (POST /v1/run/source): the answer its runner would get.
func (c *Client) RunSource(ctx context.Context) (*protocol.SourceAnswer, error) {
	var out protocol.SourceAnswer
	if err := c.do(ctx, http.MethodPost, nil, struct{}{}, &out, "v1", "run", "source"); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunRequestUpload asks, with the run token c.Token, for an upload
// capability of a declared artifact of the token's attempt
// (POST /v1/run/artifacts).
func (c *Client) RunRequestUpload(ctx context.Context, req protocol.ArtifactRequest) (*protocol.ArtifactCapability, error) {
	var out protocol.ArtifactCapability
	if err := c.do(ctx, http.MethodPost, nil, req, &out, "v1", "run", "artifacts"); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListArtifacts lists a run's stored artifacts (GET /v1/runs/{id}/artifacts).
func (c *Client) ListArtifacts(ctx context.Context, runID string) (*protocol.ArtifactList, error) {
	var out protocol.ArtifactList
	if err := c.do(ctx, http.MethodGet, nil, nil, &out, "v1", "runs", runID, "artifacts"); err != nil {
		return nil, err
	}
	return &out, nil
}

// DownloadArtifact opens the bytes of a run's artifact; the caller closes it.
func (c *Client) DownloadArtifact(ctx context.Context, runID, name string) (io.ReadCloser, error) {
	u, err := endpoint(c.BaseURL, nil, "v1", "runs", runID, "artifacts", name)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	c.authorize(req)
	return openStream(c.HTTP, req)
}

func openStream(hc *http.Client, req *http.Request) (io.ReadCloser, error) {
	if hc == nil {
		hc = defaultHTTP
	}
	req.Header.Set("Accept", "*/*")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &transportError{err: err}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp.Body, nil
}

// resolve makes a URL the server returned absolute against the base URL.
func resolve(base, ref string) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("parse base url: %w", err)
	}
	r, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("parse url %q: %w", ref, err)
	}
	return b.ResolveReference(r).String(), nil
}
