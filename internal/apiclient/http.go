package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout is the timeout of the HTTP client used when none is given.
// It must exceed the longest claim long-poll (30 s) by a comfortable margin,
// or every idle claim would end as a client-side timeout.
const DefaultTimeout = 75 * time.Second

var defaultHTTP = &http.Client{Timeout: DefaultTimeout}

// endpoint builds an absolute URL from a base URL and path segments. Each
// segment is escaped on its own, so an ID can never add a path segment.
func endpoint(base string, query url.Values, segs ...string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("parse base url: %w", err)
	}
	if u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("base url %q is not absolute", base)
	}
	prefix := strings.TrimSuffix(u.Path, "/")
	var raw, plain strings.Builder
	raw.WriteString(strings.TrimSuffix(u.EscapedPath(), "/"))
	plain.WriteString(prefix)
	for _, s := range segs {
		if s == "" {
			return nil, errors.New("empty path segment")
		}
		raw.WriteString("/" + url.PathEscape(s))
		plain.WriteString("/" + s)
	}
	u.Path, u.RawPath = plain.String(), raw.String()
	if u.RawPath == u.Path {
		u.RawPath = ""
	}
	u.RawQuery = ""
	if len(query) > 0 {
		u.RawQuery = query.Encode()
	}
	u.Fragment = ""
	return u, nil
}

// send performs one request and decodes a 2xx JSON answer into out (when out
// is non-nil and there is a body). It returns the status.
func send(hc *http.Client, req *http.Request, out any) (int, error) {
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return 0, err
		}
		return 0, &transportError{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, decodeError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		// Drain so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return resp.StatusCode, nil
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, &transportError{err: fmt.Errorf("read answer: %w", err)}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return resp.StatusCode, nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return resp.StatusCode, fmt.Errorf("decode answer of %s %s: %w", req.Method, req.URL.Path, err)
	}
	return resp.StatusCode, nil
}

// jsonBody marshals in; nil means no body.
func jsonBody(in any) ([]byte, error) {
	if in == nil {
		return nil, nil
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return b, nil
}

func newRequest(ctx context.Context, method string, u *url.URL, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	return req, nil
}
