package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/redact"
	"github.com/jobplane/jobplane/internal/store"
)

// SecretReader is the part of the store the broker reads secrets with.
type SecretReader interface {
	SecretGet(ctx context.Context, tenant, name, channel string) (*store.Secret, error)
}

// CredentialStore is the part of the store that records minted credentials
// until they are revoked.
type CredentialStore interface {
	CredentialCreate(ctx context.Context, c *store.Credential) error
	CredentialListToRevoke(ctx context.Context, now *time.Time, limit int) ([]*store.Credential, error)
	CredentialMarkFailed(ctx context.Context, id string) error
	CredentialMarkRevoked(ctx context.Context, id string, now *time.Time) error
}

// Store is everything the broker needs; store.Store satisfies it.
type Store interface {
	SecretReader
	CredentialStore
}

// Broker releases connector credentials to attempts and revokes the ones
// that must not outlive them.
type Broker struct {
	store Store
	box   *creds.Box

	// ConnectTimeout bounds connecting to a connector's database (default 5s).
	ConnectTimeout time.Duration
	// OpTimeout bounds the whole exchange with one database (default 15s).
	OpTimeout time.Duration
	// Clock tells the time (default: the real clock).
	Clock clock.Clock
}

func (b *Broker) now() time.Time {
	if b.Clock == nil {
		return clock.Real{}.Now()
	}
	return b.Clock.Now()
}

// NewBroker returns a Broker reading secrets from s, sealed with box.
func NewBroker(s Store, box *creds.Box) *Broker {
	return &Broker{store: s, box: box, ConnectTimeout: 5 * time.Second, OpTimeout: 15 * time.Second}
}

// Use is one connector a run may use, at an effective level (see Level).
type Use struct {
	Def   *connector.Definition
	Level string // connector.LevelRead | connector.LevelWrite
}

// Request asks for the connectors of one attempt.
type Request struct {
	Tenant     string
	RunID      string
	AttemptID  string
	Channel    string
	Deadline   time.Time // the attempt's deadline; minted credentials expire then
	Connectors map[string]Use
}

// Issued is what an attempt receives.
type Issued struct {
	// Env is the environment handed to the job's process.
	Env map[string]string
	// Secrets is every credential value in Env (and the DSN passwords on
	// their own), for building the attempt's redact.Masker.
	Secrets []string
}

// Issue releases the connectors of req. Connectors are handled in name
// order; on error the credentials minted so far are already recorded, so the
// reaper revokes them once the attempt ends, and nothing is returned.
//
// Errors name connectors, channels, secret names and role names, never a
// value: they end up in run records and logs.
func (b *Broker) Issue(ctx context.Context, req Request) (*Issued, error) {
	if req.Tenant == "" || req.AttemptID == "" || req.Channel == "" {
		return nil, errors.New("connector: tenant, attempt and channel are required")
	}
	out := &Issued{Env: map[string]string{}}
	set := func(conn, key, val string) error {
		name := connector.EnvName(conn, key)
		if _, dup := out.Env[name]; dup {
			return fmt.Errorf("connector %q: environment variable %s is set by another connector", conn, name)
		}
		out.Env[name] = val
		out.Secrets = append(out.Secrets, val)
		return nil
	}
	names := make([]string, 0, len(req.Connectors))
	for n := range req.Connectors {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		use := req.Connectors[name]
		def := use.Def
		if def == nil {
			return nil, fmt.Errorf("connector %q is not defined", name)
		}
		if use.Level != connector.LevelRead && use.Level != connector.LevelWrite {
			return nil, fmt.Errorf("connector %q: level must be %q or %q", name, connector.LevelRead, connector.LevelWrite)
		}
		bind := def.Bindings[req.Channel]
		if bind == nil {
			return nil, fmt.Errorf("connector %q has no binding for channel %s", def.Name, req.Channel)
		}
		switch def.Type {
		case connector.TypeStatic:
			keys := bind.Read
			if use.Level == connector.LevelWrite {
				keys = bind.Write
			}
			if len(keys) == 0 {
				return nil, fmt.Errorf("connector %q has no %s set for channel %s", def.Name, use.Level, req.Channel)
			}
			ks := make([]string, 0, len(keys))
			for k := range keys {
				ks = append(ks, k)
			}
			slices.Sort(ks)
			for _, k := range ks {
				val, _, err := b.secret(ctx, req.Tenant, keys[k], req.Channel)
				if err != nil {
					return nil, fmt.Errorf("connector %q: %w", def.Name, err)
				}
				if err := set(def.Name, k, val); err != nil {
					return nil, err
				}
			}
		case connector.TypePostgres:
			dsn, password, err := b.issuePostgres(ctx, req, def, bind, use.Level)
			if err != nil {
				return nil, fmt.Errorf("connector %q: %w", def.Name, err)
			}
			if err := set(def.Name, "DSN", dsn); err != nil {
				return nil, err
			}
			out.Secrets = append(out.Secrets, password)
		default:
			return nil, fmt.Errorf("connector %q: unknown type %q", def.Name, def.Type)
		}
	}
	return out, nil
}

// secret reads and opens a secret for a channel, falling back to the
// all-channels value. It returns the channel the value was stored under,
// which is part of the value's associated data.
func (b *Broker) secret(ctx context.Context, tenant, name, channel string) (string, string, error) {
	channels := []string{channel, ""}
	if channel == "" {
		channels = channels[:1]
	}
	for _, ch := range channels {
		s, err := b.store.SecretGet(ctx, tenant, name, ch)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", "", fmt.Errorf("secret %q: %w", name, err)
		}
		pt, err := b.box.Open(s.Ciphertext, creds.SecretAD(tenant, name, ch))
		if err != nil {
			return "", "", fmt.Errorf("secret %q (channel %q) cannot be decrypted: %w", name, ch, err)
		}
		return string(pt), ch, nil
	}
	return "", "", fmt.Errorf("secret %q is not set for channel %s", name, channel)
}

// scrubbed is an error whose message has had secret values masked. It
// deliberately does not unwrap: the original could be printed by whoever
// walks the chain.
type scrubbed struct{ msg string }

func (e *scrubbed) Error() string { return e.msg }

// scrub masks values (and their base64 forms) in err's message.
func scrub(err error, values ...string) error {
	if err == nil {
		return nil
	}
	return &scrubbed{msg: redact.NewMasker(values...).Mask(err.Error())}
}
