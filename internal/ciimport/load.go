package ciimport

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoInput is returned when a path names nothing the import can read.
var ErrNoInput = errors.New("no CI files")

// GitHubSources turns the command line's paths into sources: a repository
// checkout (its .github/workflows), a workflows directory, or single
// workflow files. Files of one repository share a source, so that
// reusable workflows and local actions resolve against it.
func GitHubSources(paths []string) ([]Source, error) {
	byRoot := map[string]*Source{}
	var order []string
	add := func(root, rel string) {
		root = filepath.Clean(root)
		s, ok := byRoot[root]
		if !ok {
			s = &Source{FS: os.DirFS(root), Prefix: filepath.ToSlash(root)}
			byRoot[root] = s
			order = append(order, root)
		}
		if !slices.Contains(s.Files, rel) {
			s.Files = append(s.Files, rel)
		}
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		clean := filepath.ToSlash(filepath.Clean(p))
		if !st.IsDir() {
			if root, rel, ok := underWorkflows(clean); ok {
				add(root, rel)
			} else {
				add(filepath.Dir(p), filepath.Base(p))
			}
			continue
		}
		dir, root, prefix := p, p, ""
		switch {
		case isDir(filepath.Join(p, ".github", "workflows")):
			dir, prefix = filepath.Join(p, ".github", "workflows"), ".github/workflows/"
		case path.Base(clean) == "workflows" && path.Base(path.Dir(clean)) == ".github":
			root, prefix = filepath.Dir(filepath.Dir(p)), ".github/workflows/"
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", dir, err)
		}
		n := 0
		for _, e := range ents {
			if e.Type().IsRegular() && (strings.HasSuffix(e.Name(), ".yml") || strings.HasSuffix(e.Name(), ".yaml")) {
				add(root, prefix+e.Name())
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: %w (no .github/workflows/*.yml)", p, ErrNoInput)
		}
	}
	out := make([]Source, 0, len(order))
	for _, r := range order {
		out = append(out, *byRoot[r])
	}
	return out, nil
}

// underWorkflows splits a workflow file's path at its repository root.
func underWorkflows(p string) (root, rel string, ok bool) {
	const marker = ".github/workflows/"
	if strings.HasPrefix(p, marker) {
		return ".", p, true
	}
	if i := strings.LastIndex(p, "/"+marker); i >= 0 {
		return p[:i], p[i+1:], true
	}
	return "", "", false
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// GitLabSource turns the command line's path into a source: a
// .gitlab-ci.yml, or a directory holding one. Local includes are read from
// the file's directory, the repository root.
func GitLabSource(p string) (Source, error) {
	st, err := os.Stat(p)
	if err != nil {
		return Source{}, fmt.Errorf("read %s: %w", p, err)
	}
	root, file := filepath.Dir(p), filepath.Base(p)
	if st.IsDir() {
		root, file = p, ".gitlab-ci.yml"
		if _, err := os.Stat(filepath.Join(p, file)); err != nil {
			return Source{}, fmt.Errorf("%s: %w (no .gitlab-ci.yml)", p, ErrNoInput)
		}
	}
	root = filepath.Clean(root)
	return Source{FS: os.DirFS(root), Prefix: filepath.ToSlash(root), Files: []string{file}}, nil
}
