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
