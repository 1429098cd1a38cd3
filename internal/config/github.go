package config

import (
	"fmt"
	"net/url"
	"os"
	"time"
)

// DefaultGitHubAPI is GitHub's REST API.
const DefaultGitHubAPI = "https://api.github.com"

// GitHubApp configures the GitHub App integration (docs/github.md). It is
// off when every field is empty.
type GitHubApp struct {
	AppID          int64  // --github-app-id
	PrivateKeyFile string // --github-private-key: the App's PEM private key
	API            string // --github-api; default DefaultGitHubAPI
	// Channel (--github-channel) is the channel of the server's
	// definitions for installations without a .jobplane repository.
	Channel string
	// WebhookSecret (JOBPLANE_GITHUB_WEBHOOK_SECRET) verifies deliveries.
	WebhookSecret string
	// PreviousWebhookSecret (JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS) is
	// still accepted, during a rotation, until PreviousUntil
	// (JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS_UNTIL, RFC 3339).
	PreviousWebhookSecret string
	PreviousUntil         string
	// OIDCIssuer (--github-oidc-issuer) is the issuer of the Actions OIDC
	// tokens workflows of the GitHub Actions mode present; default
	// DefaultGitHubOIDCIssuer.
	OIDCIssuer string
}

// DefaultGitHubOIDCIssuer is GitHub's Actions OIDC issuer.
const DefaultGitHubOIDCIssuer = "https://token.actions.githubusercontent.com"

// minWebhookSecret is the shortest secret accepted: a webhook secret is an
// HMAC key, and a short one could be guessed offline from one delivery.
const minWebhookSecret = 16

// Enabled reports whether any GitHub setting is given.
func (g *GitHubApp) Enabled() bool {
	return g.AppID != 0 || g.PrivateKeyFile != "" || g.WebhookSecret != "" || g.PreviousWebhookSecret != "" || g.PreviousUntil != ""
}

// Validate checks a configuration that is Enabled; the App needs all of its
// ID, key and webhook secret.
func (g *GitHubApp) Validate() error {
	if g.API == "" {
		g.API = DefaultGitHubAPI
	}
	if g.OIDCIssuer == "" {
		g.OIDCIssuer = DefaultGitHubOIDCIssuer
	}
	if !g.Enabled() {
		return nil
	}
	if g.AppID <= 0 {
		return &FieldError{Field: "--github-app-id", Message: "the GitHub App's numeric ID is required with any other GitHub setting"}
	}
	if g.PrivateKeyFile == "" {
		return &FieldError{Field: "--github-private-key", Message: "the GitHub App's private key file (PEM) is required"}
	}
	if len(g.WebhookSecret) < minWebhookSecret {
		return &FieldError{Field: "JOBPLANE_GITHUB_WEBHOOK_SECRET", Message: fmt.Sprintf("must be set, at least %d characters", minWebhookSecret)}
	}
	if g.PreviousWebhookSecret != "" || g.PreviousUntil != "" {
		if len(g.PreviousWebhookSecret) < minWebhookSecret {
			return &FieldError{Field: "JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS", Message: fmt.Sprintf("must be at least %d characters when a rotation is under way", minWebhookSecret)}
		}
		if _, err := g.PreviousDeadline(); err != nil {
			return err
		}
	}
	u, err := url.Parse(g.API)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return &FieldError{Field: "--github-api", Message: fmt.Sprintf("%q is not an http(s) URL", g.API)}
	}
	u, err = url.Parse(g.OIDCIssuer)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return &FieldError{Field: "--github-oidc-issuer", Message: fmt.Sprintf("%q is not an http(s) URL without query or fragment", g.OIDCIssuer)}
	}
	return nil
}

// PreviousDeadline parses PreviousUntil (zero when there is none).
func (g *GitHubApp) PreviousDeadline() (time.Time, error) {
	if g.PreviousUntil == "" {
		if g.PreviousWebhookSecret != "" {
			return time.Time{}, &FieldError{Field: "JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS_UNTIL",
				Message: "the time until which the previous secret is accepted (RFC 3339) is required"}
		}
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, g.PreviousUntil)
	if err != nil {
		return time.Time{}, &FieldError{Field: "JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS_UNTIL",
			Message: fmt.Sprintf("%q is not an RFC 3339 time such as 2026-12-01T12:00:00Z", g.PreviousUntil)}
	}
	return t, nil
}

// ReadPrivateKey reads the App's private key file.
func (g *GitHubApp) ReadPrivateKey() ([]byte, error) {
	b, err := os.ReadFile(g.PrivateKeyFile)
	if err != nil {
		return nil, &FieldError{Field: "--github-private-key", Message: err.Error()}
	}
	return b, nil
}
