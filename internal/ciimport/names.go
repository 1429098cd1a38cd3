package ciimport

import (
	"strings"

	"github.com/jobplane/jobplane/internal/connector"
)

// connectorKey is the key a connector stubbed from one CI secret releases
// its value under.
const connectorKey = "VALUE"

// slug turns a CI name into a definitions name: lower case letters, digits
// and dashes, starting with a letter or digit, at most n characters.
func slug(s string, n int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		default:
			dash = true
		}
	}
	out := b.String()
	if len(out) > n {
		out = strings.TrimRight(out[:n], "-")
	}
	return out
}

// connectorName is the connector stubbed from a CI secret.
func connectorName(secret string) string {
	if s := slug(secret, 63); s != "" {
		return s
	}
	return "secret"
}

// connectorEnv is the variable a stubbed connector's value arrives in.
func connectorEnv(conn string) string {
	return connector.EnvName(conn, connectorKey)
}
