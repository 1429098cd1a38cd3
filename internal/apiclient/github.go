package apiclient

import (
	"context"
	"net/http"
	"strconv"

	"github.com/jobplane/jobplane/internal/protocol"
)

// CreateInstallationRegistrationToken makes a registration token for the
// tenant of a GitHub App installation (operator admins only).
func (c *Client) CreateInstallationRegistrationToken(ctx context.Context, installation int64, req protocol.RegistrationTokenRequest) (*protocol.TokenResponse, error) {
	var tok protocol.TokenResponse
	if err := c.do(ctx, http.MethodPost, nil, req, &tok, "v1", "github", "installations", strconv.FormatInt(installation, 10), "registration-tokens"); err != nil {
		return nil, err
	}
	return &tok, nil
}

// CreateInstallationPrincipal adds a principal to a GitHub installation's
// tenant (operator admins).
func (c *Client) CreateInstallationPrincipal(ctx context.Context, installation int64, req protocol.PrincipalRequest) (*protocol.Principal, error) {
	var p protocol.Principal
	if err := c.do(ctx, http.MethodPost, nil, req, &p, "v1", "github", "installations", strconv.FormatInt(installation, 10), "principals"); err != nil {
		return nil, err
	}
	return &p, nil
}

// CreateInstallationPrincipalToken issues an API token for a principal of a
// GitHub installation's tenant (operator admins); shown only in this answer.
func (c *Client) CreateInstallationPrincipalToken(ctx context.Context, installation int64, name string, req protocol.PrincipalTokenRequest) (*protocol.TokenResponse, error) {
	var tok protocol.TokenResponse
	if err := c.do(ctx, http.MethodPost, nil, req, &tok, "v1", "github", "installations", strconv.FormatInt(installation, 10), "principals", name, "tokens"); err != nil {
		return nil, err
	}
	return &tok, nil
}

// RevokeInstallationToken revokes an API token of a GitHub installation's
// tenant (operator admins).
func (c *Client) RevokeInstallationToken(ctx context.Context, installation int64, tokenID string) error {
	return c.do(ctx, http.MethodDelete, nil, nil, nil, "v1", "github", "installations", strconv.FormatInt(installation, 10), "tokens", tokenID)
}
