package supervise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/jobfiles"
	"github.com/jobplane/jobplane/internal/protocol"
)

// fileTries bounds the tries of one source download or one artifact upload
// that fail in transport or with a 5xx.
const fileTries = 3

// Report is what the supervisor writes to -report once the job has ended:
// the artifacts it stored, for the worker's result (a Kubernetes
// container's termination message carries it to the worker).
type Report struct {
	Artifacts []string `json:"artifacts"`
}

// MaxReportBytes is the most a report may take: a Kubernetes termination
// message is cut at 4096 bytes.
const MaxReportBytes = 4096

// ParseArtifacts reads -artifacts: a JSON array of the declared artifacts
// ({"name","role","max_bytes"}), each name a valid artifact name.
func ParseArtifacts(s string) ([]protocol.ArtifactSpec, error) {
	if s == "" {
		return nil, nil
	}
	var specs []protocol.ArtifactSpec
	if err := json.Unmarshal([]byte(s), &specs); err != nil {
		return nil, fmt.Errorf("-artifacts: %w", err)
	}
	for _, a := range specs {
		if !validName(a.Name) {
			return nil, fmt.Errorf("-artifacts: %q is not an artifact name", a.Name)
		}
		if a.MaxBytes < 0 {
			return nil, fmt.Errorf("-artifacts: %s: negative max_bytes", a.Name)
		}
	}
	return specs, nil
}

// validName is the server's artifact name rule: [A-Za-z0-9][A-Za-z0-9._-]{0,127}.
func validName(n string) bool {
	if n == "" || len(n) > 128 {
		return false
	}
	for i, c := range n {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

// jobClient is the server as the job's run token reaches it.
func (s leaseSource) jobClient(hc *http.Client) *apiclient.Client {
	return &apiclient.Client{BaseURL: s.api, Token: s.token, HTTP: hc}
}

// fetchSource asks for the attempt's source with the run token and unpacks
// it into dir, which must be empty; the archive must be of commit. Every
// try redeems a new single-use ticket.
func (s leaseSource) fetchSource(ctx context.Context, dir, commit string, stderr io.Writer) error {
	c := s.jobClient(&http.Client{})
	var last error
	for try := range fileTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("source: %w (last error: %v)", ctx.Err(), last)
			case <-time.After(time.Duration(try) * time.Second):
			}
		}
		ans, err := c.RunSource(ctx)
		if err != nil {
			if !apiclient.Retryable(err) {
				return fmt.Errorf("source: %w", err)
			}
			last = err
			continue
		}
		if ans.Kind == protocol.SourceKindDescriptor {
			fmt.Fprintf(stderr, "jobplane: source %s at %s is not fetched on a self-hosted runner\n", ans.Repo, ans.Commit)
			return nil
		}
		if ans.Commit != commit {
			return fmt.Errorf("source: the server offers commit %q, the claim named %s", ans.Commit, commit)
		}
		rd, err := c.DownloadSourceFrom(ctx, ans.URL)
		if err != nil {
			if !apiclient.Retryable(err) {
				return fmt.Errorf("source %s: %w", ans.Repo, err)
			}
			last = err
			continue
		}
		if err := emptyDir(dir); err != nil {
			rd.Close()
			return err
		}
		got, err := jobfiles.Unpack(rd, dir)
		rd.Close()
		switch {
		case err != nil && apiclient.Retryable(err):
			last = err // a cut download: the next try asks for a new ticket
			continue
		case err != nil:
			return fmt.Errorf("source %s: %w", ans.Repo, err)
		case got != commit:
			return fmt.Errorf("source %s: the archive is of commit %q, the claim named %s", ans.Repo, got, commit)
		}
		fmt.Fprintf(stderr, "jobplane: source %s at %s unpacked\n", ans.Repo, commit)
		return nil
	}
	return fmt.Errorf("source at %s could not be fetched: %v", commit, last)
}

// emptyDir empties dir (a try that was cut may have left part of the
// archive), keeping the directory itself, which may be the job's working
// directory already.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// uploadArtifacts uploads the declared artifacts the job left in dir, as
// the worker does on its host: only regular files, opened through an
// os.Root, within max_bytes; a missing one is skipped, a refused one is
// said on stderr. It returns the IDs the server stored.
func (s leaseSource) uploadArtifacts(ctx context.Context, dir string, specs []protocol.ArtifactSpec, stderr io.Writer) []string {
	ids := []string{}
	root, err := os.OpenRoot(dir)
	if err != nil {
		fmt.Fprintf(stderr, "jobplane: cannot read the artifacts directory: %v\n", err)
		return ids
	}
	defer root.Close()
	c := s.jobClient(&http.Client{})
	for _, spec := range specs {
		err := jobfiles.CheckArtifact(root, spec.Name, spec.MaxBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var id string
		if err == nil {
			id, err = uploadOne(ctx, c, root, spec)
		}
		if err != nil {
			fmt.Fprintf(stderr, "jobplane: artifact %s not uploaded: %v\n", spec.Name, err)
			continue
		}
		fmt.Fprintf(stderr, "jobplane: artifact %s uploaded (%s)\n", spec.Name, id)
		ids = append(ids, id)
	}
	return ids
}

// uploadOne asks for a capability and sends the bytes; a try that failed in
// transport gets a new capability (each is single use).
func uploadOne(ctx context.Context, c *apiclient.Client, root *os.Root, spec protocol.ArtifactSpec) (string, error) {
	size, digest, err := jobfiles.Hash(root, spec.Name)
	if err != nil {
		return "", err
	}
	var last error
	for try := range fileTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			case <-time.After(time.Duration(try) * time.Second):
			}
		}
		capa, err := c.RunRequestUpload(ctx, protocol.ArtifactRequest{Name: spec.Name, Role: spec.Role, Size: size, SHA256: digest})
		if err != nil {
			if !apiclient.Retryable(err) {
				return "", err
			}
			last = err
			continue
		}
		f, err := root.Open(spec.Name)
		if err != nil {
			return "", err
		}
		up, err := c.UploadTo(ctx, capa.UploadURL, f, size)
		f.Close()
		if err == nil {
			return up.ArtifactID, nil
		}
		if !apiclient.Retryable(err) {
			return "", err
		}
		last = err
	}
	return "", last
}

// writeReport writes r to path, within MaxReportBytes (IDs that do not fit
// are left out: the artifacts stay stored and listed with the run).
func writeReport(path string, r Report) error {
	b, _ := json.Marshal(r)
	for len(b) > MaxReportBytes && len(r.Artifacts) > 0 {
		r.Artifacts = r.Artifacts[:len(r.Artifacts)-1]
		b, _ = json.Marshal(r)
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadReport parses a report (a Kubernetes termination message); text that
// is not one gives an empty report.
func ReadReport(s string) Report {
	var r Report
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &r); err != nil {
		return Report{}
	}
	return r
}
