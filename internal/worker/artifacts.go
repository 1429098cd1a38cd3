package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/jobfiles"
	"github.com/jobplane/jobplane/internal/protocol"
)

// errRefused marks an answer that retrying cannot change (a refused
// upload); a.call then stops without taking it for a lost lease, as it
// would any 410.
type errRefused struct{ err error }

func (e *errRefused) Error() string { return e.err.Error() }

// uploadArtifacts uploads the declared artifacts the job left in dir and
// returns the IDs the server stored. A missing artifact is not an error; a
// refused one is reported in the job's log and left out of the result.
// Names are only ever those the job declares, opened through an os.Root,
// so a symlink the job planted cannot make the runner read outside dir.
func (a *attempt) uploadArtifacts(dir string) []string {
	ids := []string{}
	if len(a.asg.Artifacts) == 0 || !a.trusted() {
		return ids
	}
	a.mu.Lock()
	stopped := a.reason != ""
	a.mu.Unlock()
	if stopped {
		return ids
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		a.system("jobplane: cannot read the artifacts directory: " + err.Error())
		return ids
	}
	defer root.Close()
	for _, spec := range a.asg.Artifacts {
		fi, err := root.Lstat(spec.Name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			a.system(fmt.Sprintf("jobplane: artifact %s not uploaded: %v", spec.Name, err))
			continue
		case !fi.Mode().IsRegular():
			a.system(fmt.Sprintf("jobplane: artifact %s not uploaded: not a regular file", spec.Name))
			continue
		case spec.MaxBytes > 0 && fi.Size() > spec.MaxBytes:
			a.system(fmt.Sprintf("jobplane: artifact %s not uploaded: %d bytes, at most %d allowed", spec.Name, fi.Size(), spec.MaxBytes))
			continue
		}
		id, err := a.uploadOne(root, spec)
		if err != nil {
			a.system(fmt.Sprintf("jobplane: artifact %s not uploaded: %v", spec.Name, err))
			continue
		}
		a.system(fmt.Sprintf("jobplane: artifact %s uploaded (%s)", spec.Name, id))
		ids = append(ids, id)
	}
	return ids
}

// maxUnavailableUploads bounds the tries of an upload the server answers
// with 503 unavailable (its object store is down): the attempt's result,
// which waits for the uploads without renewing the lease, matters more
// than one artifact.
const maxUnavailableUploads = 3

func (a *attempt) uploadOne(root *os.Root, spec protocol.ArtifactSpec) (string, error) {
	size, digest, err := hashFile(root, spec.Name)
	if err != nil {
		return "", err
	}
	var id string
	var refused error
	unavailable := 0
	// Each try gets a new capability: a capability is single use, and a
	// try that failed in transport may have used it.
	ok := a.call(context.Background(), "upload artifact "+spec.Name, func(c context.Context) error {
		capa, err := a.w.rc.RequestUpload(c, a.ref, protocol.ArtifactRequest{Name: spec.Name, Role: spec.Role, Size: size, SHA256: digest})
		if err != nil {
			if !leaseGone(err) && !apiclient.Retryable(err) {
				refused = err
				return &errRefused{err}
			}
			return err
		}
		f, err := root.Open(spec.Name)
		if err != nil {
			refused = err
			return &errRefused{err}
		}
		defer f.Close()
		up, err := a.w.rc.Upload(c, capa.UploadURL, f, size)
		if apiclient.IsCode(err, protocol.CodeUnavailable) {
			unavailable++
		}
		switch {
		case err == nil:
			id = up.ArtifactID
			return nil
		case apiclient.IsCode(err, protocol.CodeCapabilityExpired), !leaseGone(err) && !apiclient.Retryable(err),
			unavailable >= maxUnavailableUploads:
			refused = err
			return &errRefused{err}
		}
		return err
	})
	switch {
	case id != "":
		return id, nil
	case refused != nil:
		return "", refused
	case !ok:
		return "", errors.New("the attempt's lease is no longer held")
	}
	return "", errors.New("not stored")
}

// hashFile is jobfiles.Hash.
func hashFile(root *os.Root, name string) (int64, string, error) { return jobfiles.Hash(root, name) }
