package github

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxWebhookBody is the largest delivery accepted. GitHub caps payloads at
// 25 MB; anything near that is not an event jobplane acts on, and reading
// less bounds the memory an unauthenticated caller can make us spend.
const MaxWebhookBody = 5 << 20

// Webhook verification errors.
var (
	// ErrSignatureMissing: no X-Hub-Signature-256 header (a SHA-1-only
	// X-Hub-Signature does not count).
	ErrSignatureMissing = errors.New("github: webhook signature missing")
	// ErrSignatureInvalid: the signature does not match any accepted secret.
	ErrSignatureInvalid = errors.New("github: webhook signature invalid")
)

// WebhookSecrets are the secrets a delivery may be signed with. During a
// rotation GitHub signs with the new secret as soon as it is saved, while
// deliveries already in flight (and redeliveries of old ones) carry the old
// one; Previous is accepted until PreviousUntil and never after.
type WebhookSecrets struct {
	Current       []byte
	Previous      []byte
	PreviousUntil time.Time
}

// Validate checks the configuration.
func (s WebhookSecrets) Validate() error {
	if len(s.Current) == 0 {
		return errors.New("github: webhook secret is empty")
	}
	if len(s.Previous) > 0 && s.PreviousUntil.IsZero() {
		return errors.New("github: a previous webhook secret needs the time until which it is accepted")
	}
	return nil
}

// SignWebhook returns the X-Hub-Signature-256 value of body under secret.
func SignWebhook(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks header (the X-Hub-Signature-256 value) against the raw
// body bytes as received. Only these bytes are hashed: re-serialized JSON
// would differ in spacing and key order. The comparison is hmac.Equal, so
// its time does not depend on where the first difference lies.
func (s WebhookSecrets) Verify(body []byte, header string, now time.Time) error {
	if header == "" {
		return ErrSignatureMissing
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return fmt.Errorf("signature is not sha256=HEX: %w", ErrSignatureInvalid)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("signature is not 64 hex digits: %w", ErrSignatureInvalid)
	}
	if len(s.Current) > 0 && hmac.Equal(got, mac(s.Current, body)) {
		return nil
	}
	if len(s.Previous) > 0 && now.Before(s.PreviousUntil) && hmac.Equal(got, mac(s.Previous, body)) {
		return nil
	}
	return ErrSignatureInvalid
}

func mac(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}
