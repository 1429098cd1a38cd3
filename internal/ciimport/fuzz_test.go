package ciimport

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/jobplane/jobplane/internal/review"
)

// checkImport is the property both fuzz targets hold the importer to:
// whatever the input, no panic, every problem has a file and a position,
// and whatever it writes (every job forced to move) is a definitions
// repository that `jobplane validate` accepts, policy tests included.
func checkImport(t *testing.T, inv *Inventory) {
	for _, e := range append(append([]Error{}, inv.Errors...), inv.Warnings...) {
		if e.File == "" || e.Line < 1 || e.Column < 1 || e.Message == "" {
			t.Fatalf("unpositioned problem: %+v", e)
		}
	}
	Classify(inv, nil)
	for _, j := range inv.Jobs {
		j.Class.Class = ClassOperational
	}
	p := Write(inv, nil)
	rep := review.Validate(p.Files)
	if !rep.OK {
		var b bytes.Buffer
		rep.WriteText(&b)
		for name, f := range p.Files {
			t.Logf("==== %s\n%s", name, f)
		}
		t.Fatalf("written repository does not validate:\n%s", b.String())
	}
}

func seeds(f *testing.F, dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (filepath.Ext(p) == ".yml" || filepath.Ext(p) == ".yaml") {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(string(b))
			}
		}
		return nil
	})
}

func FuzzGitHub(f *testing.F) {
	seeds(f, "testdata/github/.github/workflows")
	seeds(f, "testdata/github-broken")
	f.Add("on: push\njobs: {a: {runs-on: x, steps: [{run: \"${{\"}]}}\n")
	f.Add("on: workflow_dispatch\njobs: {a: {uses: ./w.yml, with: {x: '${{ inputs.y }}'}}}\n")
	f.Add("on: {workflow_dispatch: {inputs: {n: {type: number, default: 'x'}}}}\njobs: {a: {runs-on: x, concurrency: '${{ inputs.n }}:{}', steps: [{uses: ./a}]}}\n")
	f.Add("a: &a [*a, *a]\n")
	f.Fuzz(func(t *testing.T, content string) {
		fsys := fstest.MapFS{
			"w.yml": {Data: []byte(content)},
			// Reusable workflows and composite actions of the fuzzed file
			// resolve to the file itself and to a fixed action.
			"a/action.yml": {Data: []byte("runs: {using: composite, steps: [{run: 'echo ${{ inputs.x }}', shell: bash}]}\n")},
		}
		checkImport(t, GitHub([]Source{{FS: fsys, Files: []string{"w.yml"}}}))
	})
}

func FuzzGitLab(f *testing.F) {
	for _, p := range []string{"testdata/gitlab/.gitlab-ci.yml", "testdata/gitlab-broken/.gitlab-ci.yml"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b), "x: {script: [echo]}\n")
		}
	}
	if b, err := os.ReadFile("testdata/gitlab/ci/templates.yml"); err == nil {
		f.Add("include: inc.yml\nj:\n  extends: .go-setup\n  when: manual\n", string(b))
	}
	f.Add("include: inc.yml\na: {script: !reference [b, script]}\n", "b: {script: [!reference [a, script]]}\n")
	f.Add("a: {extends: b, script: x}\nb: {extends: a}\n", "")
	f.Add("variables: {V: {value: x, options: [y], description: d}}\nj: {script: echo $V, rules: [{if: '$CI_PIPELINE_SOURCE == \"web\"', when: manual}], resource_group: 'r-$V'}\n", "")
	f.Fuzz(func(t *testing.T, main, inc string) {
		fsys := fstest.MapFS{
			".gitlab-ci.yml": {Data: []byte(main)},
			"inc.yml":        {Data: []byte(inc)},
		}
		checkImport(t, GitLab([]Source{{FS: fsys, Files: []string{".gitlab-ci.yml"}}}))
	})
}
