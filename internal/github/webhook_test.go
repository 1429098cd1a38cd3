package github_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/github"
)

// GitHub's published example ("Validating webhook deliveries"): this secret
// and payload give this signature.
const (
	vectorSecret    = "It's a Secret to Everybody"
	vectorPayload   = "Hello, World!"
	vectorSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func TestWebhookKnownAnswer(t *testing.T) {
	t.Parallel()
	require.Equal(t, vectorSignature, github.SignWebhook([]byte(vectorSecret), []byte(vectorPayload)))
	s := github.WebhookSecrets{Current: []byte(vectorSecret)}
	require.NoError(t, s.Verify([]byte(vectorPayload), vectorSignature, time.Time{}))
}

func TestWebhookVerifyRefusals(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := github.WebhookSecrets{Current: []byte(vectorSecret)}
	body := []byte(`{"action": "created",  "installation": {"id": 1}}`)
	good := github.SignWebhook([]byte(vectorSecret), body)

	// Re-serialized JSON carries the same data but not the same bytes.
	var v any
	require.NoError(t, json.Unmarshal(body, &v))
	reser, _ := json.Marshal(v)
	require.NotEqual(t, body, reser)

	flipped := []byte(good)
	flipped[len(flipped)-1] ^= 1
	cases := map[string]struct {
		body   []byte
		header string
	}{
		"missing":              {body, ""},
		"sha1 form":            {body, "sha1=" + good[len("sha256="):len("sha256=")+40]},
		"no prefix":            {body, good[len("sha256="):]},
		"wrong secret":         {body, github.SignWebhook([]byte("another"), body)},
		"one bit off":          {body, string(flipped)},
		"truncated":            {body, good[:len(good)-2]},
		"not hex":              {body, "sha256=" + string(bytes.Repeat([]byte("zz"), 32))},
		"re-serialized body":   {reser, good},
		"empty secret forgery": {body, github.SignWebhook(nil, body)},
		"uppercase prefix":     {body, "SHA256=" + good[len("sha256="):]},
	}
	for name, c := range cases {
		err := s.Verify(c.body, c.header, now)
		require.Error(t, err, name)
	}
	require.ErrorIs(t, s.Verify(body, "", now), github.ErrSignatureMissing)
	require.ErrorIs(t, s.Verify(body, string(flipped), now), github.ErrSignatureInvalid)
	require.NoError(t, s.Verify(body, good, now))
}

// W4: during a rotation both secrets verify until the overlap ends; after
// it only the new one does.
func TestWebhookSecretRotation(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := github.WebhookSecrets{Current: []byte("new"), Previous: []byte("old"), PreviousUntil: until}
	require.NoError(t, s.Validate())
	body := []byte(`{"zen":"Keep it logically awesome."}`)
	oldSig, newSig := github.SignWebhook([]byte("old"), body), github.SignWebhook([]byte("new"), body)

	require.NoError(t, s.Verify(body, oldSig, until.Add(-time.Second)))
	require.NoError(t, s.Verify(body, newSig, until.Add(-time.Second)))
	require.ErrorIs(t, s.Verify(body, oldSig, until), github.ErrSignatureInvalid)
	require.NoError(t, s.Verify(body, newSig, until.Add(time.Hour)))

	require.Error(t, github.WebhookSecrets{}.Validate())
	require.Error(t, github.WebhookSecrets{Current: []byte("a"), Previous: []byte("b")}.Validate())
}

// FuzzWebhookVerify: no input panics, and only the exact signature of the
// exact bytes under an accepted secret verifies.
func FuzzWebhookVerify(f *testing.F) {
	f.Add([]byte(vectorPayload), vectorSignature)
	f.Add([]byte(`{}`), "sha256=")
	f.Add([]byte{}, "sha1=0000")
	f.Add([]byte("x"), "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := github.WebhookSecrets{Current: []byte(vectorSecret), Previous: []byte("old"), PreviousUntil: now}
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		err := s.Verify(body, header, now)
		want := github.SignWebhook([]byte(vectorSecret), body)
		// Hex digits may come in either case; the MAC bytes are what count.
		valid := strings.HasPrefix(header, "sha256=") && strings.EqualFold(header, want)
		if (err == nil) != valid {
			t.Fatalf("Verify(%q, %q) = %v; the valid signature is %q", body, header, err, want)
		}
		// The previous secret's overlap has ended at now.
		if s.Verify(body, github.SignWebhook([]byte("old"), body), now) == nil {
			t.Fatal("previous secret accepted after its overlap")
		}
	})
}

// BenchmarkWebhookVerify measures the signature check of a typical 25 KB
// pull_request delivery.
func BenchmarkWebhookVerify(b *testing.B) {
	body := bytes.Repeat([]byte(`{"k":"v"},`), 2500)
	s := github.WebhookSecrets{Current: []byte(vectorSecret)}
	sig := github.SignWebhook([]byte(vectorSecret), body)
	now := time.Now()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Verify(body, sig, now); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseInstallationEvent: a signed but malformed payload is an error,
// never a panic, and an accepted one has what the handler relies on.
func FuzzParseInstallationEvent(f *testing.F) {
	f.Add([]byte(`{"action":"created","installation":{"id":1,"account":{"login":"acme","type":"Organization"}},"repositories":[{"id":2,"full_name":"acme/app"}]}`))
	f.Add([]byte(`{"action":"added","installation":{"id":1,"account":{"login":"a"}},"repositories_added":[{"id":3,"full_name":"a/../b"}]}`))
	f.Add([]byte(`{"action":"","installation":{"id":-1}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := github.ParseInstallationEvent(body)
		if err != nil {
			return
		}
		if ev.Action == "" || ev.Installation.ID <= 0 || ev.Installation.Account.Login == "" {
			t.Fatalf("accepted %q without action, id or account", body)
		}
		for _, r := range append(append(ev.Repositories, ev.RepositoriesAdded...), ev.RepositoriesRemoved...) {
			owner, name, _ := strings.Cut(r.FullName, "/")
			if r.ID <= 0 || strings.Count(r.FullName, "/") != 1 || owner == ".." || name == ".." || owner == "." || name == "." {
				t.Fatalf("accepted repository %+v", r)
			}
		}
	})
}

// FuzzParsePullRequestEvent: a malformed pull_request payload is an error,
// never a panic; an accepted one names an installation, a repository, a
// pull request and a full commit ID.
func FuzzParsePullRequestEvent(f *testing.F) {
	f.Add([]byte(`{"action":"opened","number":1,"installation":{"id":1},"repository":{"id":2,"full_name":"acme/app"},"sender":{"login":"x"},"pull_request":{"number":1,"draft":false,"head":{"sha":"0123456789abcdef0123456789abcdef01234567","repo":{"full_name":"acme/app"}}}}`))
	f.Add([]byte(`{"action":"opened","number":1,"installation":{"id":1},"repository":{"id":2,"full_name":"acme/app"},"sender":{"login":"x"},"pull_request":{"head":{"sha":"main","repo":null}}}`))
	f.Add([]byte(`{"action":"synchronize","installation":{"id":1},"repository":{"id":2,"full_name":"../x"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := github.ParsePullRequestEvent(body)
		if err != nil {
			return
		}
		if ev.Action == "" || ev.Installation.ID <= 0 || ev.Repository.ID <= 0 || ev.Number <= 0 || ev.Sender.Login == "" {
			t.Fatalf("accepted %q without action, installation, repository, number or sender", body)
		}
		if len(ev.HeadSHA()) != 40 || strings.Count(ev.Repository.FullName, "/") != 1 {
			t.Fatalf("accepted head %q of %q", ev.HeadSHA(), ev.Repository.FullName)
		}
		if h := ev.PullRequest.Head.Repo; h == nil && !ev.Fork() {
			t.Fatalf("a deleted head repository must count as a fork")
		}
	})
}
