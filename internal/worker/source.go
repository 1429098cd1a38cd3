package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/jobfiles"
	"github.com/jobplane/jobplane/internal/protocol"
)

// fetchSource puts the job's source commit into its working directory: a
// managed runner redeems a fresh single-use ticket per try and unpacks the
// archive, which must carry the commit the claim named. A self-hosted
// runner is told only repository and commit (JOBPLANE_SOURCE_REPO and
// JOBPLANE_SOURCE_COMMIT); fetching is then its operator's business.
func (a *attempt) fetchSource(workspace string) error {
	src := a.asg.Source
	if src == nil {
		return nil
	}
	var done bool
	var refused error
	ok := a.call(context.Background(), "fetch source", func(c context.Context) error {
		ans, err := a.w.rc.Source(c, a.ref)
		if err != nil {
			return err
		}
		if ans.Kind == protocol.SourceKindDescriptor {
			a.system(fmt.Sprintf("jobplane: source %s at %s is not fetched on a self-hosted runner", ans.Repo, ans.Commit))
			done = true
			return nil
		}
		rd, err := a.w.rc.DownloadSource(c, ans.URL)
		if err != nil {
			if apiclient.IsCode(err, protocol.CodeTicketExpired) {
				refused = err
				return &errRefused{err}
			}
			return err
		}
		defer rd.Close()
		if err := os.RemoveAll(workspace); err != nil {
			return err
		}
		if err := os.MkdirAll(workspace, 0o700); err != nil {
			return err
		}
		commit, err := unpack(rd, workspace)
		if err != nil && apiclient.Retryable(err) {
			return err // a cut download: the next try asks for a new ticket
		}
		if err != nil {
			refused = err
			return &errRefused{err}
		}
		if commit != src.Commit {
			refused = fmt.Errorf("the archive is of commit %q, the claim named %s", commit, src.Commit)
			return &errRefused{refused}
		}
		done = true
		a.system(fmt.Sprintf("jobplane: source %s at %s unpacked", src.Repo, src.Commit))
		return nil
	})
	switch {
	case done:
		return nil
	case refused != nil:
		return fmt.Errorf("source %s: %w", src.Repo, refused)
	case !ok:
		return errors.New("source: the attempt's lease is no longer held")
	}
	return fmt.Errorf("source %s at %s could not be fetched", src.Repo, src.Commit)
}

// sourceEnv tells the job which commit it runs against.
func sourceEnv(asg *protocol.Assignment) []string {
	if asg.Source == nil {
		return nil
	}
	return []string{"JOBPLANE_SOURCE_REPO=" + asg.Source.Repo, "JOBPLANE_SOURCE_COMMIT=" + asg.Source.Commit}
}

// unpack is jobfiles.Unpack: the archive's commit, unpacked into dir.
func unpack(r io.Reader, dir string) (string, error) { return jobfiles.Unpack(r, dir) }
