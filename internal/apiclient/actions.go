package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/jobplane/jobplane/internal/protocol"
)

// ActionsExchange trades a GitHub Actions OIDC token for the attempt the
// workflow was dispatched for (POST /v1/actions/exchange). On success the
// caller signs its further calls as resp.RunnerID with the private key of
// req.PublicKey.
func (c *RunnerClient) ActionsExchange(ctx context.Context, oidcToken string, req protocol.ActionsExchangeRequest) (*protocol.ActionsExchangeResponse, error) {
	var resp protocol.ActionsExchangeResponse
	if err := c.postBearer(ctx, oidcToken, req, &resp, "v1", "actions", "exchange"); err != nil {
		return nil, err
	}
	if resp.Assignment == nil || resp.RunnerID == "" {
		return nil, fmt.Errorf("actions exchange: answer without runner_id or assignment")
	}
	return &resp, nil
}

// ActionsIDToken asks the GitHub Actions runtime for the job's OIDC token
// for audience, as actions/core's getIDToken does: GET
// $ACTIONS_ID_TOKEN_REQUEST_URL&audience=… with the bearer
// $ACTIONS_ID_TOKEN_REQUEST_TOKEN. Both variables exist only in a job
// whose workflow grants `permissions: id-token: write`.
func ActionsIDToken(ctx context.Context, hc *http.Client, audience string) (string, error) {
	reqURL, reqTok := os.Getenv("ACTIONS_ID_TOKEN_REQUEST_URL"), os.Getenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
	if reqURL == "" || reqTok == "" {
		return "", fmt.Errorf("ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN are not set: run inside a GitHub Actions job with `permissions: id-token: write`")
	}
	u, err := url.Parse(reqURL)
	if err != nil {
		return "", fmt.Errorf("ACTIONS_ID_TOKEN_REQUEST_URL: %w", err)
	}
	q := u.Query()
	q.Set("audience", audience)
	u.RawQuery = q.Encode()
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	hr.Header.Set("Authorization", "Bearer "+reqTok)
	hr.Header.Set("Accept", "application/json")
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return "", fmt.Errorf("request the Actions OIDC token: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", fmt.Errorf("request the Actions OIDC token: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("request the Actions OIDC token: %s", resp.Status)
	}
	var out struct {
		Value string `json:"value"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Value == "" {
		return "", fmt.Errorf("request the Actions OIDC token: no token in the answer")
	}
	return out.Value, nil
}
