package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

var sourceRepoRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ParseSourceRepos parses --source-repo NAME=URL values: the code
// repositories jobs may name in `source: {repo: NAME}`.
func ParseSourceRepos(flags []string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range flags {
		name, url, ok := strings.Cut(f, "=")
		if !ok || url == "" {
			return nil, &FieldError{Field: "--source-repo", Message: fmt.Sprintf("%q is not NAME=URL", f)}
		}
		if !sourceRepoRE.MatchString(name) {
			return nil, &FieldError{Field: "--source-repo", Message: fmt.Sprintf("repository name %q must match %s", name, sourceRepoRE)}
		}
		if _, dup := out[name]; dup {
			return nil, &FieldError{Field: "--source-repo", Message: fmt.Sprintf("repository %q given twice", name)}
		}
		out[name] = url
	}
	return out, nil
}

// ArtifactDir is where the filesystem artifact store keeps uploads.
func (c *Server) ArtifactDir() string { return filepath.Join(c.DataDir, "artifacts") }

// SourceMirrorDir is where source repositories given by URL are mirrored.
func (c *Server) SourceMirrorDir() string { return filepath.Join(c.DataDir, "sources") }
