package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
)

// ArtifactsCmd lists a run's artifacts or downloads one.
type ArtifactsCmd struct {
	ClientFlags
	RunID    string `arg:"" name:"run" help:"Run ID."`
	Download string `help:"Download the artifact of this name (the latest attempt's)." placeholder:"NAME"`
	Output   string `short:"o" help:"Where to write the download: a file, or - for standard output (default: NAME in the current directory)." placeholder:"PATH"`
}

// Run lists or downloads.
func (c *ArtifactsCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	list, err := cl.ListArtifacts(g.Ctx, c.RunID)
	if err != nil {
		return err
	}
	if c.Download == "" {
		if c.JSON {
			return json.NewEncoder(g.Stdout).Encode(list)
		}
		if len(list.Artifacts) == 0 {
			_, err := fmt.Fprintf(g.Stdout, "run %s has no artifacts\n", c.RunID)
			return err
		}
		tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tROLE\tSIZE\tATTEMPT\tSHA256")
		for _, a := range list.Artifacts {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", a.Name, a.Role, a.Size, a.AttemptNumber, a.SHA256)
		}
		return tw.Flush()
	}
	want := ""
	for _, a := range list.Artifacts {
		if a.Name == c.Download {
			want = a.SHA256 // the list is by attempt, so the last match is the latest
		}
	}
	if want == "" {
		return fmt.Errorf("run %s has no artifact %q", c.RunID, c.Download)
	}
	rd, err := cl.DownloadArtifact(g.Ctx, c.RunID, c.Download)
	if err != nil {
		return err
	}
	defer rd.Close()
	if c.Output == "-" {
		return copyVerified(g.Stdout, rd, want)
	}
	out := c.Output
	if out == "" {
		out = filepath.Base(c.Download)
	}
	// Write next to the target and rename, so a failed or corrupt
	// download never leaves a partial file under the final name.
	tmp, err := os.CreateTemp(filepath.Dir(out), ".jobplane-download-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = copyVerified(tmp, rd, want)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	_, err = fmt.Fprintf(g.Stderr, "wrote %s (sha256 %s)\n", out, want)
	return err
}

// copyVerified copies and checks the SHA-256 the server listed.
func copyVerified(w io.Writer, r io.Reader, want string) error {
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), r); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return errors.New("download: SHA-256 " + got + " differs from the stored " + want)
	}
	return nil
}
