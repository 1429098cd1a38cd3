package control

import (
	"context"
	"fmt"
	"regexp"

	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

var secretNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// MaxSecretBytes bounds one secret value.
const MaxSecretBytes = 64 << 10

// SetSecret stores a secret value, sealed with the server key and bound to
// its tenant, name and channel. The value is never logged, audited or
// returned by any read.
func (s *Service) SetSecret(ctx context.Context, actor principal.Actor, name, channel, value string) error {
	if err := principal.RequireAdmin(actor); err != nil {
		return err
	}
	if !secretNameRE.MatchString(name) {
		return &protocol.FieldError{Field: "name", Err: fmt.Errorf("secret name must match %s: %w", secretNameRE, protocol.ErrBadRequest)}
	}
	if channel != "" && !nameRE.MatchString(channel) {
		return &protocol.FieldError{Field: "channel", Err: fmt.Errorf("channel must match %s: %w", nameRE, protocol.ErrBadRequest)}
	}
	if value == "" || len(value) > MaxSecretBytes {
		return &protocol.FieldError{Field: "value", Err: fmt.Errorf("value must be 1 to %d bytes: %w", MaxSecretBytes, protocol.ErrBadRequest)}
	}
	if s.creds == nil {
		return fmt.Errorf("secrets are not configured: %w", protocol.ErrUnavailable)
	}
	sealed := s.creds.box.Seal([]byte(value), creds.SecretAD(actor.TenantID, name, channel))
	return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.SecretPut(ctx, &store.Secret{Tenant: actor.TenantID, Name: name, Channel: channel, Ciphertext: sealed}); err != nil {
			return err
		}
		return s.audit(ctx, tx, actor.TenantID, actor.Name, "secret.set", name, map[string]any{"channel": channel})
	}))
}
