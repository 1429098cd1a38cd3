package executor

import (
	"fmt"
	"path"
	"path/filepath"
)

// Workdir resolves a job's working directory inside an image-based
// executor (a container, a pod): the workspace when wd is empty, a
// relative path within the workspace, or an absolute path of the image.
// A relative path that climbs out of the workspace is refused, the same
// in every executor, so a definition that runs in a container also runs
// in a pod and the other way round.
func Workdir(workspace, wd string) (string, error) {
	switch {
	case wd == "":
		return workspace, nil
	case path.IsAbs(wd):
		return path.Clean(wd), nil
	case filepath.IsLocal(wd):
		return path.Join(workspace, wd), nil
	}
	return "", fmt.Errorf("workdir %q leaves the workspace", wd)
}
