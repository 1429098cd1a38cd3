package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/process"
	"github.com/jobplane/jobplane/internal/tracing"
)

// Config configures a Worker.
type Config struct {
	// Server is the server's base URL (required unless Servers is set); the
	// job also receives it as JOBPLANE_API.
	Server string
	// Servers, when set, are several base URLs of replicas on one database,
	// in order of preference; Server is then ignored. Every call fails over
	// from a server that is unreachable or answers 503 to the next one (see
	// apiclient.Server), and a host name that resolves to several addresses
	// counts as one server per address. The job receives the URL of the
	// server current when it starts.
	Servers []string
	// RegistrationToken registers the runner on first start; it is needed only
	// while StateDir holds no runner.json.
	RegistrationToken string
	// Pool is informational: the registration token decides the pool.
	Pool string
	// Labels are sent at registration.
	Labels []string
	// StateDir holds the identity and the attempts' working directories
	// (required).
	StateDir string
	// Concurrency is the number of attempts run at once. Default 1.
	Concurrency int
	// Name is the runner's name at registration. Default: the host name.
	Name string
	// Version is reported at registration.
	Version string
	// Logger receives the worker's logs. Default: discard.
	Logger *slog.Logger
	// Clock drives every deadline. Default: the real clock.
	Clock clock.Clock
	// WaitSeconds is the claim long-poll, 1..30. Default 25.
	WaitSeconds int
	// HTTP is the HTTP client; its Timeout, if set, must exceed WaitSeconds.
	// Default: apiclient's client (timeout apiclient.DefaultTimeout).
	HTTP *http.Client
	// Executor runs the jobs. Default: a process executor.
	Executor executor.Executor
	// Tracing makes a span of each attempt and sends the attempt's trace
	// with its requests; nil is off (the job still gets TRACEPARENT).
	Tracing *tracing.Tracing
}

// ConfigError names the bad field of a Config.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "worker config: " + e.Field + ": " + e.Reason }

func (c *Config) setDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.WaitSeconds == 0 {
		c.WaitSeconds = 25
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Name == "" {
		c.Name, _ = os.Hostname()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Executor == nil {
		c.Executor = process.New(process.Options{Clock: c.Clock})
	}
}

// Validate checks c as New will use it (zero values take their defaults) and
// names the first bad field.
func (c Config) Validate() error {
	c.setDefaults()
	if len(c.serverURLs()) == 0 {
		return &ConfigError{"Server", "is required"}
	}
	for _, s := range c.serverURLs() {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &ConfigError{"Server", fmt.Sprintf("%q is not an http(s) URL", s)}
		}
	}
	switch {
	case c.StateDir == "":
		return &ConfigError{"StateDir", "is required"}
	case c.Concurrency < 1:
		return &ConfigError{"Concurrency", "must be at least 1"}
	case c.WaitSeconds < 1 || c.WaitSeconds > apiclient.MaxClaimWait:
		return &ConfigError{"WaitSeconds", fmt.Sprintf("must be within 1..%d", apiclient.MaxClaimWait)}
	case c.HTTP != nil && c.HTTP.Timeout != 0 && c.HTTP.Timeout <= time.Duration(c.WaitSeconds+5)*time.Second:
		return &ConfigError{"HTTP", fmt.Sprintf("timeout %s must exceed the claim wait of %d s by more than 5 s", c.HTTP.Timeout, c.WaitSeconds)}
	}
	return nil
}

// serverURLs are the configured servers, in order of preference.
func (c *Config) serverURLs() []string {
	if len(c.Servers) > 0 {
		return c.Servers
	}
	if c.Server == "" {
		return nil
	}
	return []string{c.Server}
}

var errNoRegistrationToken = errors.New("worker config: RegistrationToken: is required to register a new runner (no runner.json in StateDir)")
