package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSigninNextStaysOnSite: the Location a sign-in answers, for every
// hostile next (raw, with the characters browsers drop, and encoded),
// resolves to this site, as a browser resolves it after dropping tabs and
// newlines.
func TestSigninNextStaysOnSite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	site, err := url.Parse(e.url + "/signin")
	require.NoError(t, err)
	for _, next := range []string{
		"/\t/evil.example", "/\n/evil.example", "\t//evil.example", "//evil.example", `/\evil.example`, `/\/evil.example`,
		"/%09/evil.example", "/%2F%2Fevil.example", "/%2f/evil.example", "/%5Cevil.example", "/%5c%5cevil.example",
		"/.//evil.example", "/..//evil.example", "/%2e%2e//evil.example", "https://evil.example", "/\x00/evil.example",
		"http:/evil.example", "/runs?x=//evil.example",
	} {
		c := e.client()
		_, body := c.get("/signin?next=" + url.QueryEscape(next))
		pre := csrfRE.FindStringSubmatch(body)[1]
		resp, _ := c.post("/signin", url.Values{"csrf": {pre}, "token": {adminToken}, "next": {next}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "%q", next)
		loc := resp.Header.Get("Location")
		ref, err := url.Parse(strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(loc))
		require.NoError(t, err, "%q → %q", next, loc)
		// Browsers treat a backslash as a slash in http(s) URLs.
		ref2, err := url.Parse(strings.ReplaceAll(ref.String(), `\`, "/"))
		require.NoError(t, err)
		for _, r := range []*url.URL{ref, ref2} {
			u := site.ResolveReference(r)
			require.Equal(t, site.Host, u.Host, "next %q → Location %q leaves the site", next, loc)
			require.Equal(t, site.Scheme, u.Scheme, "next %q → Location %q", next, loc)
		}
	}
}
