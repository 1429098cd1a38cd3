package artifact

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
)

// MaxNameLen bounds an artifact name.
const MaxNameLen = 128

// DefaultMaxBytes is the size limit of a declared artifact whose job sets
// none (docs/artifacts.md).
const DefaultMaxBytes = 100 << 20

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	segmentRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
)

// ErrInvalidName is returned for a name or key segment that is refused.
var ErrInvalidName = errors.New("invalid artifact name")

// ValidName reports whether name is an acceptable artifact name: the
// protocol's [A-Za-z0-9][A-Za-z0-9._-]{0,127}. The first character can be
// neither a dot nor a separator, so ".", ".." and hidden names are out, and
// no character can be a separator, an escape or a control character.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %q must match %s", ErrInvalidName, truncate(name), nameRE)
	}
	return nil
}

// Key is the storage key of an artifact: tenant/run/attempt/name. Every
// segment is checked, and the result must be a local path, so a key can
// never name anything outside the attempt's own prefix.
func Key(tenant, run, attempt, name string) (string, error) {
	for _, seg := range []string{tenant, run, attempt} {
		if !segmentRE.MatchString(seg) {
			return "", fmt.Errorf("%w: key segment %q must match %s", ErrInvalidName, truncate(seg), segmentRE)
		}
	}
	if err := ValidName(name); err != nil {
		return "", err
	}
	k := path.Join(tenant, run, attempt, name)
	// Belt and braces: the regular expressions already exclude everything
	// IsLocal refuses, but the property the store relies on is this one.
	if !filepath.IsLocal(k) || path.Dir(k) != path.Join(tenant, run, attempt) {
		return "", fmt.Errorf("%w: key %q is not local to its prefix", ErrInvalidName, k)
	}
	return k, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
