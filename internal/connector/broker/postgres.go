package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/store"
)

// KindPostgres is the Credential.Kind of a minted PostgreSQL login role.
const KindPostgres = "postgres"

// PostgresRef is the Credential.Ref of a minted role: names only, enough to
// find the admin DSN again and drop the role. Never a password.
type PostgresRef struct {
	Role    string `json:"role"`
	Secret  string `json:"secret"`
	Channel string `json:"channel"` // the channel the secret is stored under ("" = all)
}

// RoleName is the login role minted for an attempt's use of a connector:
// jp_<attempt>_<connector>, lower-cased, every character outside [a-z0-9]
// as '_'. The connector is part of the name because two connectors of one
// job may point at the same cluster, where role names are global: with
// jp_<attempt> alone the second would take over the first's role and
// invalidate its password. Names longer than PostgreSQL's 63-byte limit
// keep a prefix and end in a hash of the whole, so they stay unique instead
// of being silently truncated by the server.
func RoleName(attemptID, connector string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
				return r
			case r >= 'A' && r <= 'Z':
				return r + ('a' - 'A')
			}
			return '_'
		}, s)
	}
	name := "jp_" + clean(attemptID) + "_" + clean(connector)
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(attemptID + "\x00" + connector))
	return name[:63-17] + "_" + hex.EncodeToString(sum[:8])
}

// sqlTimestamp formats t for a SQL literal: digits, '-', ':', '.', 'T' and
// 'Z' only, so it needs no escaping; microseconds are PostgreSQL's precision.
func sqlTimestamp(t time.Time) string {
	return t.UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.999999Z07:00")
}

func (b *Broker) connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errBadDSN
	}
	cfg.ConnectTimeout = b.ConnectTimeout
	// The admin DSN is the server's own configuration, but its password must
	// not surface through pgx's error messages either.
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, scrub(fmt.Errorf("connect: %w", err), cfg.Password, dsn)
	}
	return conn, nil
}

// issuePostgres mints (or re-keys) the attempt's login role and returns the
// job's DSN and its password.
func (b *Broker) issuePostgres(ctx context.Context, req Request, def *connector.Definition, bind *connector.Binding, level string) (string, string, error) {
	grant, other := bind.ReadRole, bind.WriteRole
	if level == connector.LevelWrite {
		grant, other = bind.WriteRole, bind.ReadRole
	}
	if grant == "" {
		return "", "", fmt.Errorf("no %s_role for channel %s", level, req.Channel)
	}
	if req.Deadline.IsZero() || !req.Deadline.After(b.now()) {
		return "", "", errors.New("attempt deadline is missing or has passed")
	}
	admin, secretChannel, err := b.secret(ctx, req.Tenant, bind.Secret, req.Channel)
	if err != nil {
		return "", "", err
	}
	role := RoleName(req.AttemptID, def.Name)
	password := newPassword()
	dsn, err := jobDSN(admin, role, password)
	if err != nil {
		return "", "", fmt.Errorf("secret %q: %w", bind.Secret, err)
	}

	// Record first: if the server dies between CREATE ROLE and this call
	// returning, the row is already there for the reaper to act on. A row
	// whose role was never created is revoked as "already gone".
	ref, _ := json.Marshal(PostgresRef{Role: role, Secret: bind.Secret, Channel: secretChannel})
	if err := b.store.CredentialCreate(ctx, &store.Credential{
		Tenant: req.Tenant, RunID: req.RunID, AttemptID: req.AttemptID,
		Connector: def.Name, Kind: KindPostgres, Ref: string(ref),
	}); err != nil {
		return "", "", fmt.Errorf("record credential: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, b.OpTimeout)
	defer cancel()
	conn, err := b.connect(ctx, admin)
	if err != nil {
		return "", "", fmt.Errorf("secret %q: %w", bind.Secret, err)
	}
	defer conn.Close(context.Background())

	ident := pgx.Identifier{role}.Sanitize()
	// CREATE ROLE and ALTER ROLE take no bind parameters, so the password
	// and the expiry are literals. Both are safe to inline without escaping:
	// the verifier is "SCRAM-SHA-256$", digits, ':' and standard base64
	// ([A-Za-z0-9+/=]), and the timestamp is digits and "-:.TZ" — neither can
	// contain a quote or a backslash. The plaintext password (base64url)
	// never goes to the server at all; see scramVerifier.
	secretClause := "LOGIN PASSWORD '" + scramVerifier(password) + "' VALID UNTIL '" + sqlTimestamp(req.Deadline) + "'"
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			_, err := tx.Exec(ctx, "CREATE ROLE "+ident+" "+secretClause+" IN ROLE "+pgx.Identifier{grant}.Sanitize())
			return err
		}
		// Issued again for the same attempt (a retried fetch): rotate the
		// password, which invalidates the earlier DSN, and make sure the
		// role holds exactly the granted role of the pair.
		if _, err := tx.Exec(ctx, "ALTER ROLE "+ident+" "+secretClause); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "GRANT "+pgx.Identifier{grant}.Sanitize()+" TO "+ident); err != nil {
			return err
		}
		if other != "" && other != grant {
			if _, err := tx.Exec(ctx, "REVOKE "+pgx.Identifier{other}.Sanitize()+" FROM "+ident); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", "", scrub(fmt.Errorf("mint role %s: %w", role, err), password, admin)
	}
	return dsn, password, nil
}

// Revoke drops the credentials whose attempt has ended or whose lease ran
// out before now (nil: the database's clock), up to limit of them, and
// returns how many it revoked. It is the single path for both a normal end
// and the reaper: a failure of one credential is reported (errors.Join) and
// does not stop the others, which are retried on the next call.
func (b *Broker) Revoke(ctx context.Context, now *time.Time, limit int) (int, error) {
	rows, err := b.store.CredentialListToRevoke(ctx, now, limit)
	if err != nil {
		return 0, fmt.Errorf("list credentials to revoke: %w", err)
	}
	var errs []error
	n := 0
	for _, c := range rows {
		if err := b.revokeOne(ctx, c); err != nil {
			errs = append(errs, fmt.Errorf("credential %s (connector %q): %w", c.ID, c.Connector, err))
			// Count it, so that a credential that keeps failing (its
			// database gone, its admin secret rotated) moves behind the
			// others instead of filling every batch.
			if err := b.store.CredentialMarkFailed(ctx, c.ID); err != nil {
				errs = append(errs, fmt.Errorf("credential %s: count failure: %w", c.ID, err))
			}
			continue
		}
		if err := b.store.CredentialMarkRevoked(ctx, c.ID, now); err != nil {
			errs = append(errs, fmt.Errorf("credential %s: mark revoked: %w", c.ID, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (b *Broker) revokeOne(ctx context.Context, c *store.Credential) error {
	if c.Kind != KindPostgres {
		return fmt.Errorf("unknown credential kind %q", c.Kind)
	}
	var ref PostgresRef
	if err := json.Unmarshal([]byte(c.Ref), &ref); err != nil || ref.Role == "" || ref.Secret == "" {
		return errors.New("malformed reference")
	}
	admin, _, err := b.secret(ctx, c.Tenant, ref.Secret, ref.Channel)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, b.OpTimeout)
	defer cancel()
	conn, err := b.connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("secret %q: %w", ref.Secret, err)
	}
	defer conn.Close(context.Background())
	if err := dropRole(ctx, conn, ref.Role); err != nil {
		return scrub(fmt.Errorf("drop role %s: %w", ref.Role, err), admin)
	}
	return nil
}

// dropRole ends a minted role's sessions and removes it. A role that does
// not exist (never created, or dropped by a concurrent reaper) is success.
//
// REASSIGN OWNED and DROP OWNED act only on the current database (plus
// shared objects), so this covers objects the role created in the DSN's
// database — the only one its DSN reaches unless the granted roles allow
// connecting elsewhere. Objects in other databases would make DROP ROLE fail,
// which is reported and retried, never ignored.
func dropRole(ctx context.Context, conn *pgx.Conn, role string) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return nil
	}
	ident := pgx.Identifier{role}.Sanitize()
	// NOLOGIN first, so no new session slips in between terminating the
	// existing ones and dropping the role.
	steps := []string{
		"ALTER ROLE " + ident + " NOLOGIN",
		// With a timeout (PostgreSQL 14+) the call waits for the backend to
		// exit. Without waiting, REASSIGN OWNED can race the dying session's
		// cleanup of its temporary tables ("could not open relation").
		"SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = $1",
		"REASSIGN OWNED BY " + ident + " TO CURRENT_USER",
		"DROP OWNED BY " + ident,
		"DROP ROLE IF EXISTS " + ident,
	}
	for _, s := range steps {
		var err error
		if strings.Contains(s, "$1") {
			_, err = conn.Exec(ctx, s, role)
		} else {
			_, err = conn.Exec(ctx, s)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42704" { // undefined_object: already gone
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}
