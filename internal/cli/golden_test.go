package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// fakeAPI answers the few routes the golden tests call, with fixed
// payloads, and records the bodies of the run requests it gets.
type fakeAPI struct {
	mu     sync.Mutex
	bodies []string
	paths  []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	f.mu.Unlock()
	problem := func(status int, code, detail, field string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(protocol.Problem{Title: code, Status: status, Code: code, Detail: detail, Field: field})
	}
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		// The server's encoder escapes HTML, as encoding/json does by default.
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/runs":
		b, _ := io.ReadAll(r.Body)
		var req protocol.RunRequest
		_ = json.Unmarshal(b, &req)
		f.mu.Lock()
		f.bodies = append(f.bodies, string(req.Params))
		f.mu.Unlock()
		switch {
		case req.Job != "hello":
			problem(http.StatusNotFound, protocol.CodeUnknownJob, "unknown job "+req.Job, "")
		case strings.Contains(string(req.Params), "nmae"):
			problem(http.StatusUnprocessableEntity, protocol.CodeInvalidParams, "additional property nmae is not allowed", "nmae")
		default:
			w.WriteHeader(http.StatusCreated)
			reply(protocol.Run{ID: "run_1", State: "queued", Job: "hello", Channel: "prod", Commit: "0123456789abcdef0123"})
		}
	case r.URL.Path == "/v1/jobs":
		reply(map[string]any{"channel": "prod", "branch": "main", "commit": "0123456789abcdef0123",
			"jobs": []map[string]any{{"name": "hello", "owners": []string{"ops"}}, {"name": "count", "owners": []string{"ops"}}}})
	case r.URL.Path == "/v1/jobs/hello":
		reply(map[string]any{"channel": "prod", "branch": "main", "commit": "0123456789abcdef0123", "name": "hello", "file": "jobs/hello.yaml",
			"owners": []string{"ops"}, "may_run": []map[string]any{{"principal": "*", "rule": "anyone"}},
			"definition": json.RawMessage(`{"name":"hello","params":{"type":"object","properties":{"name":{"type":"string","default":"world"},"loud":{"type":"boolean"}}},` +
				`"run":{"command":["sh","-c","echo <hi> && true"],"timeout":1800000000000,"lease_ttl":5400000000000,"network":""},"retries":{"max_attempts":3,"backoff":10000000000}}`)})
	case r.URL.Path == "/v1/audit":
		if r.URL.Query().Get("after") != "0" {
			reply(protocol.AuditList{Events: []protocol.AuditEvent{}, Next: 1})
			return
		}
		reply(protocol.AuditList{Next: 1, Events: []protocol.AuditEvent{{Seq: 1, At: time.Date(2026, 8, 14, 12, 0, 0, 0, time.UTC), Actor: "admin", Action: "run.requested", Subject: "run_1",
			Details: json.RawMessage(`{"reason":"fix <b>&</b> \u003cnot a tag\u003e"}`), Hash: "abcdef0123456789"}}})
	default:
		problem(http.StatusNotFound, protocol.CodeNotFound, "no route "+r.URL.Path, "")
	}
}

// TestGoldenCLI runs client verbs against a fixed fake server and compares
// what they print and their exit codes with testdata/golden (go test
// -run TestGoldenCLI -update rewrites them).
func TestGoldenCLI(t *testing.T) {
	api := &fakeAPI{}
	// The fake's answers are a few fixed payloads, but the requests the
	// verbs send are checked against the OpenAPI document.
	srv := httptest.NewServer(openapitest.Requests(t, "", api))
	t.Cleanup(srv.Close)
	s := []string{"--server", srv.URL, "--token", "jpt_test"}
	defsDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(defsDir, "README.md"), []byte("not definitions\n"), 0o600))
	// A Git repository without definitions: an application's repository,
	// where a CI step ran diff by mistake.
	appRepo := filepath.Join(t.TempDir(), "app")
	_, err := gitsync.InitRepo(appRepo, "main", map[string]string{"main.go": "package main\n"}, "first")
	require.NoError(t, err)
	_, err = gitsync.CommitFiles(appRepo, "main", map[string]string{"README.md": "app\n"}, "second")
	require.NoError(t, err)
	dead := deadURL(t)

	cases := []struct {
		name string
		args []string
		code int
	}{
		{"params-json-array", append([]string{"run", "hello", "-p", "ids=[1,2]", "-p", `label="a,b"`, "-p", "n=3", "-p", "who=x,y"}, s...), 0},
		{"params-malformed", append([]string{"run", "hello", "-p", "novalue"}, s...), ExitUsage},
		{"jobs-show-durations", append([]string{"jobs", "show", "hello"}, s...), 0},
		{"runs-state-bogus", append([]string{"runs", "--state", "bogus"}, s...), ExitUsage},
		{"validate-empty-dir", []string{"validate", defsDir}, ExitFailed},
		{"diff-no-definitions", []string{"diff", "HEAD~1", "HEAD", "--repo", appRepo}, ExitFailed},
		{"audit-unescaped", append([]string{"audit"}, s...), 0},
		{"audit-json-unescaped", append([]string{"audit", "--json"}, s...), 0},
		{"unknown-job-did-you-mean", append([]string{"run", "helo"}, s...), ExitRefused},
		{"unknown-param-allowed", append([]string{"run", "hello", "-p", "nmae=x"}, s...), ExitRefused},
		{"unreachable", []string{"runs", "--server", dead, "--token", "t"}, ExitUnreachable},
		{"no-args-help", nil, 0},
		{"unknown-command", []string{"frobnicate"}, ExitUsage},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := run(t, c.args...)
			got := "exit " + itoa(code) + "\n--- stdout\n" + out + "--- stderr\n" + errOut
			got = strings.ReplaceAll(got, srv.URL, "SERVER")
			got = strings.ReplaceAll(got, dead, "DEAD")
			got = strings.ReplaceAll(got, defsDir, "DIR")
			got = strings.ReplaceAll(got, appRepo, "REPO")
			golden(t, c.name, got)
			require.Equal(t, c.code, code, got)
		})
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	require.JSONEq(t, `{"ids":[1,2],"label":"a,b","n":3,"who":"x,y"}`, api.bodies[0], "-p values are not split on commas")
	for _, p := range api.paths {
		require.NotContains(t, p, "GET /v1/runs", "a bad --state is refused before asking the server")
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test -run TestGoldenCLI -update")
	require.Equal(t, string(want), got)
}

func itoa(n int) string { return strconv.Itoa(n) }

// deadURL is a loopback address nothing listens on.
func deadURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		30 * time.Minute: "30m", 90 * time.Minute: "1h30m", time.Hour: "1h", 10 * time.Second: "10s",
		90 * time.Second: "1m30s", 0: "0s", 1500 * time.Millisecond: "1.5s", 49 * time.Hour: "49h",
	} {
		require.Equal(t, want, humanDuration(d), d.String())
	}
}

func TestUnescapeHTML(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a":"\u003cb\u003e \u0026"}`: `{"a":"<b> &"}`,
		`{"a":"\\u003cb"}`:             `{"a":"\\u003cb"}`,
		`{"a":"\\\u003c"}`:             `{"a":"\\<"}`,
		`{"a":"\u00e9\n"}`:             `{"a":"\u00e9\n"}`,
		`"\u003C"`:                     `"<"`,
		`"trailing\`:                   `"trailing\`,
	} {
		got := string(unescapeHTML([]byte(in)))
		require.Equal(t, want, got, in)
		var a, b any
		if json.Unmarshal([]byte(in), &a) == nil {
			require.NoError(t, json.Unmarshal([]byte(got), &b), in)
			require.Equal(t, a, b, "same value after unescaping %s", in)
		}
	}
}

// FuzzUnescapeHTML: unescaping never changes what a JSON document means.
func FuzzUnescapeHTML(f *testing.F) {
	f.Add([]byte(`{"a":"\u003cb\u003e \u0026 \\u003c"}`))
	f.Add([]byte(`"\\\u0026"`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var a any
		if json.Unmarshal(in, &a) != nil {
			return
		}
		var b any
		out := unescapeHTML(in)
		if err := json.Unmarshal(out, &b); err != nil {
			t.Fatalf("%q became invalid: %q: %v", in, out, err)
		}
		ab, _ := json.Marshal(a)
		bb, _ := json.Marshal(b)
		if !bytes.Equal(ab, bb) {
			t.Fatalf("%q changed meaning: %q", in, out)
		}
	})
}

func TestVersion(t *testing.T) {
	saved := buildInfo
	t.Cleanup(func() { buildInfo = saved })
	buildInfo = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/jobplane/jobplane", Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-08-14T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := run(t, args...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "jobplane v1.2.3 (revision 0123456789abcdef, 2026-08-14T12:00:00Z, with uncommitted changes)", args)
	}
	buildInfo = func() (*debug.BuildInfo, bool) { return nil, false }
	_, out, _ := run(t, "version")
	require.Contains(t, out, "jobplane dev (revision unknown")
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := run(t, "completion", sh)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "jobplane", sh)
		path := filepath.Join(t.TempDir(), "jobplane."+sh)
		require.NoError(t, os.WriteFile(path, []byte(out), 0o600))
		bin, err := exec.LookPath(sh)
		if err != nil {
			if sh == "bash" {
				t.Fatalf("bash is needed to check the bash script: %v", err)
			}
			t.Logf("%s not installed: its script is not parsed", sh)
			continue
		}
		// -n: parse without running.
		cmd := exec.Command(bin, "-n", path)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s -n: %s", sh, b)
	}
	// The bash function completes commands, subcommands and flags.
	_, script, _ := run(t, "completion", "bash")
	complete := func(line string) string {
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		var arr strings.Builder
		for _, w := range words {
			arr.WriteString(" '" + w + "'")
		}
		sh := script + "\nCOMP_WORDS=(" + arr.String() + "); COMP_CWORD=" + itoa(len(words)-1) + "; _jobplane; echo \"${COMPREPLY[*]}\"\n"
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "bash", "-c", sh).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	require.Equal(t, "run runs runners", complete("jobplane run"))
	require.Equal(t, "list show", complete("jobplane runs "))
	require.Contains(t, strings.Fields(complete("jobplane run hello --")), "--param")
	require.Contains(t, strings.Fields(complete("jobplane runs list --st")), "--state")

	// zsh, when installed, completes from its script the same way: a real
	// interactive zsh in a pseudo-terminal, Tab pressed on the line.
	if zsh, err := exec.LookPath("zsh"); err == nil {
		_, script, _ := run(t, "completion", "zsh")
		dir := t.TempDir()
		path := filepath.Join(dir, "jobplane.zsh")
		require.NoError(t, os.WriteFile(path, []byte(script), 0o600))
		driver, err := filepath.Abs(filepath.Join("testdata", "zsh-complete.zsh"))
		require.NoError(t, err)
		zcomplete := func(line string) string {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, zsh, "-f", driver, path, line)
			// compinit writes its dump under HOME: a directory of the test's.
			cmd.Env = []string{"HOME=" + dir, "ZDOTDIR=" + dir, "PATH=" + os.Getenv("PATH"), "TERM=dumb"}
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "zsh completing %q: %s", line, out)
			seen := map[string]bool{}
			var got []string
			for _, w := range strings.Fields(string(out)) {
				if !seen[w] {
					seen[w] = true
					got = append(got, w)
				}
			}
			slices.Sort(got)
			return strings.Join(got, " ")
		}
		require.Equal(t, "run runners runs", zcomplete("jobplane ru"))
		require.Equal(t, "list show", zcomplete("jobplane runs "))
		require.Contains(t, strings.Fields(zcomplete("jobplane run hello --")), "--param")
		require.Equal(t, "--state", zcomplete("jobplane runs list --st"))
	} else {
		t.Log("zsh not installed: its script is only generated")
	}

	// fish, when installed, completes from its script the same way.
	if fish, err := exec.LookPath("fish"); err == nil {
		_, script, _ := run(t, "completion", "fish")
		path := filepath.Join(t.TempDir(), "jobplane.fish")
		require.NoError(t, os.WriteFile(path, []byte(script), 0o600))
		out, err := exec.Command(fish, "-c", "source "+path+`; complete -C "jobplane runs "; complete -C "jobplane run hello --ch"`).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "show\tShow one run.")
		require.Contains(t, string(out), "--channel\t")
	}
}
