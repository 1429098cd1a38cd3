package github

import (
	"fmt"
	"log/slog"
	"time"
)

const redacted = "[redacted]"

// Token is an installation access token. Every way of formatting it
// (String, GoString, %v, slog, JSON) prints "[redacted]": the value leaves
// this package only in an Authorization header.
type Token struct {
	value     string
	ExpiresAt time.Time
}

// String redacts.
func (Token) String() string { return redacted }

// GoString redacts (%#v).
func (Token) GoString() string { return redacted }

// Format redacts every verb, including %s, %q and %x on the struct.
func (Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue redacts in log/slog.
func (Token) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON redacts, so a token embedded in a logged struct stays hidden.
func (Token) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText redacts.
func (Token) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// IsZero reports whether the token is empty.
func (t Token) IsZero() bool { return t.value == "" }

// reveal is the only way to read the value; it is used to set the
// Authorization header and nowhere else.
func (t Token) reveal() string { return t.value }
