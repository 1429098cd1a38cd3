package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
)

// isPlainDir reports whether p is a local directory that is not the top
// of a Git repository (neither a work tree nor a bare repository): the
// server reads definitions from commits, so dev must make one.
func isPlainDir(p string) bool {
	if strings.Contains(p, "://") {
		return false
	}
	fi, err := os.Stat(p)
	if err != nil || !fi.IsDir() {
		return false
	}
	if _, err := os.Stat(filepath.Join(p, ".git")); err == nil {
		return false
	}
	_, headErr := os.Stat(filepath.Join(p, "HEAD"))
	_, objErr := os.Stat(filepath.Join(p, "objects"))
	return headErr != nil || objErr != nil
}

// maxSnapshotFile bounds one file copied into a dev snapshot; definitions
// files are small (catalog.MaxFileSize), anything larger is not one.
const maxSnapshotFile = 4 << 20

// readDirFiles reads the regular files under dir (not .git), keyed by their
// slash-separated path.
func readDirFiles(dir string) (map[string]string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxSnapshotFile+1))
		if err != nil {
			return err
		}
		if len(b) > maxSnapshotFile {
			return nil
		}
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	return files, err
}

// snapshotDefinitions commits the files of a plain directory to a Git
// repository under dataDir, a new commit at each start, and returns the
// repository's path.
func snapshotDefinitions(dir, dataDir string) (string, map[string]string, error) {
	files, err := readDirFiles(dir)
	if err != nil {
		return "", nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	snap := filepath.Join(dataDir, "snapshot")
	// Start over each time, so that files deleted from dir are gone from
	// the snapshot too.
	if err := os.RemoveAll(snap); err != nil {
		return "", nil, err
	}
	abs, _ := filepath.Abs(dir)
	if _, err := gitsync.InitRepo(snap, "main", files, "Snapshot of "+abs+" by jobplane dev"); err != nil {
		return "", nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	return snap, files, nil
}

// connectorSecrets lists the secret names the static connectors of files
// refer to, sorted.
func connectorSecrets(files map[string]string) []string {
	var names []string
	for p, data := range files {
		if !strings.HasPrefix(p, "connectors/") || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			continue
		}
		d, errs := connector.Parse(p, []byte(data))
		if d == nil || len(errs) > 0 || d.Type != connector.TypeStatic {
			continue
		}
		for _, b := range d.Bindings {
			for _, m := range []map[string]string{b.Read, b.Write} {
				for _, s := range m {
					if !slices.Contains(names, s) {
						names = append(names, s)
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

// seedSecrets gives every secret the connectors name a placeholder value,
// once: a name dev set before (listed in DATA-DIR/dev-secrets) is left
// alone, so a real value set later with `jobplane secrets set` stays.
func seedSecrets(ctx context.Context, cl *apiclient.Client, dataDir string, names []string, out io.Writer) error {
	listFile := filepath.Join(dataDir, "dev-secrets")
	b, err := os.ReadFile(listFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	done := strings.Fields(string(b))
	var set []string
	for _, n := range names {
		if slices.Contains(done, n) {
			continue
		}
		if err := cl.SetSecret(ctx, n, "", "dev-placeholder-"+n); err != nil {
			return fmt.Errorf("dev: set placeholder secret %s: %w", n, err)
		}
		set = append(set, n)
	}
	if len(set) == 0 {
		return nil
	}
	fmt.Fprintf(out, "dev: gave the connectors' secrets placeholder values (%s); set real ones with jobplane secrets set NAME\n", strings.Join(set, ", "))
	return os.WriteFile(listFile, []byte(strings.Join(append(done, set...), "\n")+"\n"), 0o600)
}

// devSecondPrincipal is the developer `jobplane dev` creates next to the
// admin, so that approvals have a requester who is not the approver.
const devSecondPrincipal = "alice"

// seedApproval creates alice and her token on the first start, and
// requests migrate as alice: a run waiting for the admin's approval. It
// returns that run's ID, "" when alice existed already.
func seedApproval(ctx context.Context, cl *apiclient.Client, dataDir string) (string, error) {
	tokFile := filepath.Join(dataDir, devSecondPrincipal+"-token")
	if _, err := os.Stat(tokFile); err == nil {
		return "", nil
	}
	if _, err := cl.CreatePrincipal(ctx, protocol.PrincipalRequest{Name: devSecondPrincipal, Kind: "user"}); err != nil {
		var ae *apiclient.APIError
		if !errors.As(err, &ae) || ae.Problem.Code != protocol.CodeAlreadyExists {
			return "", fmt.Errorf("dev: create principal %s: %w", devSecondPrincipal, err)
		}
	}
	tok, err := cl.CreatePrincipalToken(ctx, devSecondPrincipal, protocol.PrincipalTokenRequest{})
	if err != nil {
		return "", fmt.Errorf("dev: token for %s: %w", devSecondPrincipal, err)
	}
	if err := os.WriteFile(tokFile, []byte(tok.Token+"\n"), 0o600); err != nil {
		return "", err
	}
	as := &apiclient.Client{BaseURL: cl.BaseURL, Token: tok.Token, HTTP: cl.HTTP}
	run, err := as.CreateRun(ctx, &protocol.RunRequest{Job: "migrate", Channel: "prod", Params: []byte(`{"target_version":2}`),
		Reason: "dev example: a developer's migration, waiting for an operator's approval", IdempotencyKey: "dev-example-approval"})
	if err != nil {
		return "", fmt.Errorf("dev: request migrate as %s: %w", devSecondPrincipal, err)
	}
	return run.ID, nil
}
