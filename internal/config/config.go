// Package config holds the server's and the CLI's configuration: defaults,
// validation that names the bad field, and where the CLI finds its server and
// token. Flags and environment are parsed by internal/cli; files are read
// only here.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// FieldError names the configuration field at fault.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Server configures `jobplane server`.
type Server struct {
	Listen      string            // host:port
	DB          string            // sqlite:PATH or postgres://…
	Definitions string            // path (read in place) or URL (mirrored) of the definitions repository
	Channels    map[string]string // channel → branch, or branch pattern (feature/*)
	// Protected lists the branches (names or patterns) whose channels count
	// as protected in policies; default main.
	Protected []string
	// SyncInterval is how often a mirrored repository is fetched and every
	// channel re-resolved and recorded; default 30 s.
	SyncInterval time.Duration
	DataDir      string
	AdminToken   string // JOBPLANE_ADMIN_TOKEN
	// IsolateWriteGrants hands runs with a connector granted at write only
	// to isolated runners.
	IsolateWriteGrants bool
	// SecretKey (JOBPLANE_SECRET_KEY) is the 32-byte key, hex or base64,
	// that seals secrets and signing keys; without it the server keeps one
	// in DataDir/secret.key.
	SecretKey string
	// PublicURL is how jobs and runners reach the server (JOBPLANE_API); it
	// defaults to http://Listen.
	PublicURL string
	// SourceRepos maps a repository name to its URL or path (--source-repo).
	SourceRepos map[string]string
	// GitHub configures the GitHub App integration (config/github.go).
	GitHub GitHubApp
	// Storage is where artifacts and moved logs are kept
	// (config/storage.go).
	Storage Storage
	// Retention is how long the logs and artifacts of ended runs are kept
	// when their job sets no period (zero: kept).
	Retention Retention
}

// Retention holds the server's default retention periods.
type Retention struct {
	Logs, Artifacts time.Duration
	// ArchiveLogs is how long after its end a run's logs move from the
	// database to the object store (zero: they stay).
	ArchiveLogs time.Duration
}

var channelRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ParseChannels turns NAME=BRANCH flags into a map; BRANCH may be a
// path.Match pattern (sandbox=feature/*), making a pattern channel.
func ParseChannels(flags []string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range flags {
		name, branch, ok := strings.Cut(f, "=")
		if !ok || name == "" || branch == "" {
			return nil, &FieldError{Field: "--channel", Message: fmt.Sprintf("%q is not NAME=BRANCH", f)}
		}
		if !channelRE.MatchString(name) {
			return nil, &FieldError{Field: "--channel", Message: fmt.Sprintf("channel name %q must match %s", name, channelRE)}
		}
		if _, err := path.Match(branch, ""); err != nil {
			return nil, &FieldError{Field: "--channel", Message: fmt.Sprintf("branch pattern %q: %v", branch, err)}
		}
		if _, dup := out[name]; dup {
			return nil, &FieldError{Field: "--channel", Message: fmt.Sprintf("channel %q given twice", name)}
		}
		out[name] = branch
	}
	return out, nil
}

// Defaults fills unset fields.
func (c *Server) Defaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7420"
	}
	if c.DataDir == "" {
		c.DataDir = ".jobplane"
	}
	if c.DB == "" {
		c.DB = "sqlite:" + filepath.Join(c.DataDir, "jobplane.db")
	}
	if len(c.Channels) == 0 {
		c.Channels = map[string]string{"prod": "main"}
	}
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Listen
	}
	if len(c.Protected) == 0 {
		c.Protected = []string{"main"}
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = 30 * time.Second
	}
}

// MirrorDir is where remote definitions repositories are mirrored.
func (c *Server) MirrorDir() string { return filepath.Join(c.DataDir, "mirror") }

// Validate names the first bad field.
func (c *Server) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return &FieldError{Field: "--listen", Message: "must be host:port"}
	}
	if _, _, err := ParseDSN(c.DB); err != nil {
		return err
	}
	if c.Definitions == "" {
		return &FieldError{Field: "--definitions", Message: "a definitions repository (a path, or a URL: file://, https://, ssh://) is required"}
	}
	for _, p := range c.Protected {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return &FieldError{Field: "--protected", Message: fmt.Sprintf("%q is not a branch name or pattern", p)}
		}
	}
	if c.SyncInterval < time.Second {
		return &FieldError{Field: "--sync-interval", Message: "must be at least 1s"}
	}
	if _, _, err := c.Storage.S3(); err != nil {
		return err
	}
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		return &FieldError{Field: "JOBPLANE_ADMIN_TOKEN", Message: "must be at least 16 characters"}
	}
	return nil
}

// ParseDSN splits a --db value into its driver and the driver's DSN.
func ParseDSN(dsn string) (driver, rest string, err error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		p := strings.TrimPrefix(dsn, "sqlite:")
		if p == "" {
			return "", "", &FieldError{Field: "--db", Message: "sqlite: needs a path"}
		}
		return "sqlite", p, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return "postgres", dsn, nil
	}
	return "", "", &FieldError{Field: "--db", Message: fmt.Sprintf("%q is neither sqlite:PATH nor a postgres:// URL", redact(dsn))}
}

func redact(dsn string) string {
	if i := strings.Index(dsn, "@"); i > 0 {
		return "…" + dsn[i:]
	}
	return dsn
}

// ChannelNames lists channels in a stable order.
func ChannelNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Client is where the CLI sends requests.
type Client struct {
	Server string `json:"server"`
	Token  string `json:"token"`
}

// ClientFile is the file `jobplane dev` writes under its data directory.
const ClientFile = "cli.json"

// LoadClient resolves the CLI's server and token: flags, then JOBPLANE_SERVER
// and JOBPLANE_TOKEN, then ./.jobplane/cli.json (written by `jobplane dev`).
func LoadClient(flagServer, flagToken string) (Client, error) {
	c := Client{Server: flagServer, Token: flagToken}
	if c.Server == "" {
		c.Server = os.Getenv("JOBPLANE_SERVER")
	}
	if c.Token == "" {
		c.Token = os.Getenv("JOBPLANE_TOKEN")
	}
	if c.Server == "" || c.Token == "" {
		var f Client
		b, err := os.ReadFile(filepath.Join(".jobplane", ClientFile))
		if err == nil {
			if err := json.Unmarshal(b, &f); err != nil {
				return c, fmt.Errorf(".jobplane/%s: %w", ClientFile, err)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return c, err
		}
		if c.Server == "" {
			c.Server = f.Server
		}
		if c.Token == "" {
			c.Token = f.Token
		}
	}
	if c.Server == "" {
		return c, errors.New("no server: set JOBPLANE_SERVER (or --server), or start `jobplane dev` in this directory")
	}
	return c, nil
}

// WriteClient writes the CLI's file with owner-only permissions (it holds a token).
func WriteClient(dir string, c Client) error {
	b, _ := json.MarshalIndent(c, "", "  ")
	return os.WriteFile(filepath.Join(dir, ClientFile), append(b, '\n'), 0o600)
}
