package catalog

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseImageRef(t *testing.T) {
	t.Parallel()
	digest := "@sha256:" + strings.Repeat("ab", 32)
	for _, ok := range []string{
		"busybox", "busybox:1.36", "library/busybox:latest", "docker.io/library/busybox",
		"ghcr.io/jobplane/runner-image:v1.2.3", "localhost:5000/app", "localhost/app",
		"registry.example.com:443/team/app_x/y__z/a--b:tag_1-2.3", "busybox" + digest,
		"ghcr.io/a/b:1" + digest, "a.b", "x/y.z",
	} {
		require.NoError(t, ParseImageRef(ok), ok)
	}
	for _, bad := range []string{
		"", "Busybox", "busybox:", ":tag", "busybox@sha256:abc", "busybox@md5:" + strings.Repeat("a", 64),
		"busybox@sha256:" + strings.Repeat("A", 64), "a//b", "/a", "a/", "a..b", "-a", "a-", "a___b",
		"host:0/app", "host:99999/app", "host:x/app", "bad_host.com/app", ".com/app", "a b",
		"a:-tag", "a:" + strings.Repeat("t", 129), strings.Repeat("a", MaxImageRefLen+1), "a@" + digest[1:] + "x",
		"busybox:1.36" + digest + "@x",
	} {
		require.Error(t, ParseImageRef(bad), bad)
	}
}

func TestParseQuantities(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"500m": 500, "2": 2000, "0.5": 500, "1.25": 1250, "0.001": 1, "1024": MaxCPUMillis} {
		got, err := ParseCPU(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		back, err := ParseCPU(FormatCPU(got))
		require.NoError(t, err, in)
		require.Equal(t, got, back, in)
	}
	for _, in := range []string{"", "0", "0m", "0.0001", "-1", "-500m", "1.5m", "2c", "1e3", ".5", "1025", "m", "99999999999m", " 1"} {
		_, err := ParseCPU(in)
		require.Error(t, err, in)
	}
	for in, want := range map[string]int64{"256Mi": 256 << 20, "1Gi": 1 << 30, "512M": 512e6, "1024": 1024, "2Ki": 2048, "1k": 1000, "1Ti": 1 << 40} {
		got, err := ParseMemory(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		back, err := ParseMemory(FormatMemory(got))
		require.NoError(t, err, in)
		require.Equal(t, got, back, in)
	}
	for _, in := range []string{"", "0", "0Mi", "-1Gi", "1.5Gi", "1GB", "1Pi", "1gi", "Mi", "2048Ti", "99999999999999999"} {
		_, err := ParseMemory(in)
		require.Error(t, err, in)
	}
}

func TestJobIsolationFields(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files("jobs/hello.yaml", minimalJob))
	j, _ := c.Job("hello")
	require.Equal(t, NetworkDefault, j.Run.Network)
	require.Equal(t, IsolationNone, j.Isolation)
	require.Empty(t, j.Run.Image)
	require.Nil(t, j.Run.Resources)

	body := "name: hello\nisolation: required\nrun:\n  command: [echo, hi]\n  image: ghcr.io/acme/tools:1.2\n" +
		"  resources: {cpu: 0.5, memory: 256Mi}\n  network: none\n  workdir: /src\n"
	c = mustParse(t, files("jobs/hello.yaml", body))
	j, _ = c.Job("hello")
	require.Equal(t, "ghcr.io/acme/tools:1.2", j.Run.Image)
	require.Equal(t, &Resources{CPUMillis: 500, MemoryBytes: 256 << 20}, j.Run.Resources)
	require.Equal(t, NetworkNone, j.Run.Network)
	require.Equal(t, "/src", j.Run.Workdir)
	require.Equal(t, IsolationRequired, j.Isolation)
	b, err := json.Marshal(j)
	require.NoError(t, err)
	require.Contains(t, string(b), `"image":"ghcr.io/acme/tools:1.2","resources":{"cpu_millis":500,"memory_bytes":268435456},"network":"none","workdir":"/src"`)
	require.Contains(t, string(b), `"isolation":"required"`)

	for _, extra := range []string{"  resources: {cpu: 2}\n", "  resources: {cpu: \"500m\", memory: 1Gi}\n", "  workdir: build/out\n", "  workdir: ./a/../b\n"} {
		mustParse(t, files("jobs/hello.yaml", minimalJob+extra))
	}
	mustParse(t, files("jobs/hello.yaml", minimalJob+"isolation: none\n"))

	for _, tt := range []struct {
		body              string
		line, col         int
		field, msgContain string
	}{
		{"  image: Ubuntu:22.04\n", 4, 10, "run.image", `path component "Ubuntu"`},
		{"  image: busybox@sha256:abc\n", 4, 10, "run.image", "digest must be sha256:"},
		{"  image: 7\n", 4, 10, "run.image", "must be a string"},
		{"  resources: {cpu: 0}\n", 4, 20, "run.resources.cpu", "must be more than 0"},
		{"  resources: {cpu: -1}\n", 4, 20, "run.resources.cpu", "invalid CPU quantity"},
		{"  resources: {cpu: 2cores}\n", 4, 20, "run.resources.cpu", "invalid CPU quantity"},
		{"  resources: {cpu: .inf}\n", 4, 20, "run.resources.cpu", "must be a quantity"},
		{"  resources: {memory: 0Mi}\n", 4, 23, "run.resources.memory", "must be more than 0"},
		{"  resources: {memory: 1GB}\n", 4, 23, "run.resources.memory", "invalid memory quantity"},
		{"  resources: {gpu: 1}\n", 4, 15, "run.resources.gpu", `unknown field "gpu"`},
		{"  resources: 2\n", 4, 14, "run.resources", "must be a mapping"},
		{"  network: host\n", 4, 12, "run.network", `must be none or default, got "host"`},
		{"  workdir: ../etc\n", 4, 12, "run.workdir", "must stay inside the workspace"},
		{"  workdir: a/../../b\n", 4, 12, "run.workdir", "must stay inside the workspace"},
		{"  workdir: /src\n", 4, 12, "run.workdir", "needs run.image"},
		{"  workdir: \"\"\n", 4, 12, "run.workdir", "non-empty"},
		{"isolation: maybe\n", 4, 12, "isolation", `must be required or none, got "maybe"`},
		{"isolation: {required: true}\n", 4, 13, "isolation", "must be a string"},
	} {
		requireJobError(t, tt.body, tt.line, tt.col, tt.field, tt.msgContain)
	}
}

func FuzzImageRef(f *testing.F) {
	for _, s := range []string{"busybox", "ghcr.io/a/b:1@sha256:" + strings.Repeat("0", 64), "localhost:5000/x", "a:b:c", "@", ":", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ParseImageRef(s) != nil {
			return
		}
		// An accepted reference is printable ASCII without spaces, of
		// bounded length, and its path is lowercase.
		if len(s) > MaxImageRefLen || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r > '~' }) {
			t.Fatalf("accepted %q", s)
		}
		name, _, _ := strings.Cut(s, "@")
		if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
			name = name[:i]
		}
		parts := strings.Split(name, "/")
		if strings.ToLower(parts[len(parts)-1]) != parts[len(parts)-1] {
			t.Fatalf("accepted uppercase path in %q", s)
		}
	})
}
