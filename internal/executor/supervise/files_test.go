package supervise

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseArtifacts: -artifacts yields only declared artifacts with valid
// names (no path can reach the artifacts directory's parent) and
// non-negative limits, or an error.
func FuzzParseArtifacts(f *testing.F) {
	for _, s := range []string{`[{"name":"out.txt","role":"report","max_bytes":1000}]`, `[]`, `[{"name":"../x"}]`, `[{"name":"a","max_bytes":-1}]`,
		`{"name":"a"}`, `[{"name":""}]`, `[{"name":"a/b"}]`, `[{"name":".hidden"}]`, "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		specs, err := ParseArtifacts(in)
		if err != nil {
			return
		}
		for _, a := range specs {
			if !validName(a.Name) || strings.ContainsAny(a.Name, "/\\\x00") || a.Name == "." || a.Name == ".." || !filepath.IsLocal(a.Name) || a.MaxBytes < 0 {
				t.Fatalf("accepted %+v", a)
			}
		}
	})
}

// FuzzReadReport: any termination message gives a report (empty when it
// is not one) without panicking, and a written report reads back.
func FuzzReadReport(f *testing.F) {
	for _, s := range []string{`{"artifacts":["art_1"]}`, `{"artifacts":null}`, "", "not json", `{"artifacts":[1]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		_ = ReadReport(in)
		var ids []string
		if err := json.Unmarshal([]byte(in), &ids); err != nil {
			return
		}
		path := filepath.Join(t.TempDir(), "report")
		if err := writeReport(path, Report{Artifacts: ids}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > MaxReportBytes {
			t.Fatalf("report of %d bytes", len(b))
		}
		got := ReadReport(string(b)).Artifacts
		if len(got) > len(ids) {
			t.Fatalf("read %d IDs back, wrote %d", len(got), len(ids))
		}
		for i := range got {
			if got[i] != ids[i] {
				t.Fatalf("ID %d: %q, wrote %q", i, got[i], ids[i])
			}
		}
	})
}

// TestArtifactsFlagRoundTrip: the executor's -artifacts value parses back.
func TestArtifactsFlagRoundTrip(t *testing.T) {
	o, cmd, err := parse(Args(Options{ControlFD: -1, StatusFD: -1, UntilMS: 5, Workspace: "/w", ArtifactsDir: "/a", SourceCommit: "abc",
		Artifacts: `[{"name":"out.txt","role":"r","max_bytes":7}]`, Report: "/dev/termination-log"}, []string{"sh", "-c", "true"}), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := ParseArtifacts(o.Artifacts)
	if err != nil || len(specs) != 1 || specs[0].Name != "out.txt" || specs[0].MaxBytes != 7 || o.SourceCommit != "abc" || o.Workspace != "/w" ||
		o.Report != "/dev/termination-log" || len(cmd) != 3 {
		t.Fatalf("%+v %v %v", o, specs, err)
	}
	for _, bad := range [][]string{{"-source-commit=abc", "--", "true"}, {"-artifacts=[]", "--", "true"}, {"-artifacts-dir=/a", "-artifacts=[{\"name\":\"../x\"}]", "--", "true"}} {
		if _, _, err := parse(bad, &strings.Builder{}); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}
