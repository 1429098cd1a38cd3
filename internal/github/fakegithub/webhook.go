package fakegithub

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // GitHub still sends the legacy SHA-1 header; the fake does too.
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Delivery is one webhook delivery as GitHub sends it.
type Delivery struct {
	GUID  string
	Event string
	Body  []byte
}

// Response is what the receiver answered.
type Response struct {
	Status int
	Body   []byte
}

// NewDelivery marshals a payload into a delivery with a fresh GUID.
func NewDelivery(event string, payload any) Delivery {
	b, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	return Delivery{GUID: newGUID(), Event: event, Body: b}
}

func newGUID() string {
	h := randHex(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Send posts a delivery to url signed with secret, with the headers GitHub
// sets. Sending the same Delivery again is a redelivery (same GUID).
func Send(ctx context.Context, url string, secret []byte, d Delivery) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return Response{}, err
	}
	m := hmac.New(sha256.New, secret)
	m.Write(d.Body)
	m1 := hmac.New(sha1.New, secret)
	m1.Write(d.Body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/fake")
	req.Header.Set("X-GitHub-Event", d.Event)
	req.Header.Set("X-GitHub-Delivery", d.GUID)
	req.Header.Set("X-GitHub-Hook-ID", "1")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	req.Header.Set("X-Hub-Signature", "sha1="+hex.EncodeToString(m1.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return Response{Status: resp.StatusCode, Body: b}, nil
}

// InstallationPayload is an "installation" event of the given action
// (created, deleted, suspend, unsuspend) for one of the fake's installations,
// listing its repositories.
func (f *Fake) InstallationPayload(action string, installation int64) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.installations[installation]
	if in == nil {
		panic(fmt.Sprintf("fakegithub: no installation %d", installation))
	}
	var repos []map[string]any
	for _, rp := range f.sortedRepos(installation) {
		repos = append(repos, repoJSON(rp))
	}
	return map[string]any{
		"action":       action,
		"installation": f.installationJSON(in),
		"repositories": repos,
		"sender":       map[string]any{"login": in.Account + "-admin", "type": "User"},
	}
}

// InstallationRepositoriesPayload is an "installation_repositories" event
// adding and removing repositories (names without the owner).
func (f *Fake) InstallationRepositoriesPayload(installation int64, added, removed []string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.installations[installation]
	action := "added"
	if len(added) == 0 {
		action = "removed"
	}
	list := func(names []string) []map[string]any {
		out := []map[string]any{}
		for _, n := range names {
			rp := f.repos[strings.ToLower(in.Account+"/"+n)]
			if rp == nil {
				rp = &Repo{FullName: in.Account + "/" + n, Private: true}
			}
			out = append(out, repoJSON(rp))
		}
		return out
	}
	return map[string]any{
		"action": action, "installation": f.installationJSON(in), "repository_selection": "selected",
		"repositories_added": list(added), "repositories_removed": list(removed),
		"sender": map[string]any{"login": in.Account + "-admin", "type": "User"},
	}
}

func (f *Fake) installationJSON(in *Installation) map[string]any {
	return map[string]any{
		"id": in.ID, "app_id": f.appID, "repository_selection": "selected", "permissions": in.Permissions,
		"account": map[string]any{"login": in.Account, "id": accountID(in.ID), "type": in.AccountType},
	}
}

func repoJSON(rp *Repo) map[string]any {
	return map[string]any{"id": rp.ID, "name": rp.FullName[strings.IndexByte(rp.FullName, '/')+1:],
		"full_name": rp.FullName, "private": rp.Private}
}

func (f *Fake) sortedRepos(installation int64) []*Repo {
	var out []*Repo
	for _, rp := range f.repos {
		if rp.Installation == installation {
			out = append(out, rp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FullName < out[j].FullName })
	return out
}

// PullRequest describes a pull request event to build.
type PullRequest struct {
	Installation int64
	Repo         string // the base repository, owner/name
	Number       int
	Action       string // opened, synchronize, reopened, ready_for_review, closed...
	HeadSHA      string
	HeadRef      string // default "feature"
	BaseRef      string // default "main"
	// HeadRepo is the repository the head branch lives in; a different one
	// than Repo makes the pull request come from a fork.
	HeadRepo string
	Draft    bool
	Sender   string // default "octocat"
	// UpdatedAt is the pull request's updated_at; default the fake's now.
	UpdatedAt time.Time
}

// PullRequestPayload is a "pull_request" event in GitHub's shape (the
// fields jobplane reads and a few around them).
func (f *Fake) PullRequestPayload(pr PullRequest) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.installations[pr.Installation]
	if in == nil {
		panic(fmt.Sprintf("fakegithub: no installation %d", pr.Installation))
	}
	base := f.repos[strings.ToLower(pr.Repo)]
	if base == nil {
		panic(fmt.Sprintf("fakegithub: no repository %s", pr.Repo))
	}
	def := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	headRepo := def(pr.HeadRepo, base.FullName)
	updated := pr.UpdatedAt
	if updated.IsZero() {
		updated = f.clock.Now()
	}
	fork := !strings.EqualFold(headRepo, base.FullName)
	headOwner := headRepo[:strings.IndexByte(headRepo, '/')]
	sender := def(pr.Sender, "octocat")
	baseJSON := repoJSON(base)
	baseJSON["fork"] = false
	baseJSON["owner"] = map[string]any{"login": in.Account}
	headJSON := map[string]any{"full_name": headRepo, "name": headRepo[strings.IndexByte(headRepo, '/')+1:], "fork": fork,
		"owner": map[string]any{"login": headOwner}}
	if !fork {
		headJSON = baseJSON
	}
	return map[string]any{
		"action": pr.Action,
		"number": pr.Number,
		"pull_request": map[string]any{
			"number": pr.Number, "state": "open", "draft": pr.Draft, "updated_at": updated.UTC().Format(time.RFC3339),
			"html_url": "https://github.com/" + base.FullName + "/pull/" + fmt.Sprint(pr.Number),
			"user":     map[string]any{"login": sender},
			"head":     map[string]any{"sha": pr.HeadSHA, "ref": def(pr.HeadRef, "feature"), "label": headOwner + ":" + def(pr.HeadRef, "feature"), "repo": headJSON},
			"base":     map[string]any{"ref": def(pr.BaseRef, "main"), "repo": baseJSON},
		},
		"repository":   baseJSON,
		"installation": map[string]any{"id": in.ID},
		"sender":       map[string]any{"login": sender, "type": "User"},
	}
}
