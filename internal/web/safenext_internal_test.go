package web

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSafeNextOnlySameOriginPaths(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"", "runs", "//evil.example", "/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example", "\t//evil.example",
		`/\evil.example`, `\\evil.example`, "https://evil.example/", "/ /evil.example", "/\x00/evil", "/\u00a0/evil",
		"/\u2028/evil", "/" + strings.Repeat("a", 3000),
	} {
		require.Equal(t, "/runs", safeNext(bad), "%q", bad)
	}
	for _, good := range []string{"/runs", "/runs/run_1?tab=log", "/audit?actor=alice#x", "/%09/x"} {
		require.Equal(t, good, safeNext(good), "%q", good)
	}
}

// FuzzSafeNext: whatever comes back resolves, against any origin, to that
// same origin.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/runs", "/\t/evil.example", "//x", `/\x`, "/a?b=//c"} {
		f.Add(s)
	}
	base, _ := url.Parse("https://jobplane.example/runs/x")
	f.Fuzz(func(t *testing.T, n string) {
		got := safeNext(n)
		// What a browser does first: drop tabs and newlines.
		cleaned := strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(got)
		ref, err := url.Parse(cleaned)
		if err != nil {
			t.Fatalf("safeNext(%q) = %q does not parse", n, got)
		}
		if u := base.ResolveReference(ref); u.Host != base.Host || u.Scheme != base.Scheme {
			t.Fatalf("safeNext(%q) = %q leaves the origin: %s", n, got, u)
		}
	})
}
