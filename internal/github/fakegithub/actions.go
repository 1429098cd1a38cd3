package fakegithub

import (
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// The GitHub Actions side of the fake: the workflow-dispatch endpoint and
// an Actions OIDC issuer that signs tokens for simulated workflow runs.

// oidcKeyNumber is the Key number of the issuer's signing key.
const oidcKeyNumber = 90

// oidcTokenLifetime is how long GitHub's Actions OIDC tokens live.
const oidcTokenLifetime = 5 * time.Minute

// Workflow is a workflow file of a repository that can be dispatched.
type Workflow struct {
	Repo string // owner/name
	File string // e.g. jobplane.yml, under .github/workflows/
	// Inputs are the workflow_dispatch inputs the file declares; a
	// dispatch with any other input is refused (422), as GitHub does.
	Inputs []string
}

// Dispatch is one accepted workflow dispatch.
type Dispatch struct {
	Repo         string // owner/name
	RepoID       int64
	OwnerID      int64
	Workflow     string // the file name
	Ref          string // as given (a branch or tag name, or a full ref)
	FullRef      string // refs/heads/… or refs/tags/…
	SHA          string // the commit the ref named when dispatched
	Inputs       map[string]string
	Installation int64 // of the token that dispatched
}

// WorkflowRun is a simulated run of a dispatched workflow: what GitHub's
// OIDC token describes.
type WorkflowRun struct {
	Dispatch
	RunID      int64
	RunAttempt int64
	Actor      string
}

type actionsState struct {
	key       *rsa.PrivateKey
	kid       string
	workflows map[string]*Workflow // lower(repo)+"/"+file
	// dispatches is guarded by the Fake's mutex.
	dispatches []Dispatch
	nextRun    atomic.Int64
	jti        atomic.Int64
}

func (a *actionsState) init(t testing.TB) {
	a.key = Key(t, oidcKeyNumber)
	a.kid = "fake-actions-oidc-1"
	a.workflows = map[string]*Workflow{}
	a.nextRun.Store(7_000_000_000)
}

func accountID(installation int64) int64 { return installation * 10 }

// AddWorkflow makes a workflow file dispatchable in its repository.
func (f *Fake) AddWorkflow(w Workflow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions.workflows[strings.ToLower(w.Repo)+"/"+w.File] = &w
}

// Dispatches returns the workflow dispatches accepted so far, in order.
func (f *Fake) Dispatches() []Dispatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Dispatch(nil), f.actions.dispatches...)
}

// dispatchWorkflow is POST /repos/{o}/{r}/actions/workflows/{workflow}/dispatches
// with an installation token carrying actions: write on the repository
// (repoScoped checks both). GitHub answers 204; 404 for an unknown
// workflow; 422 for a ref that does not exist, an input the workflow does
// not declare, more than 25 inputs or a non-string input value.
func (f *Fake) dispatchWorkflow(w http.ResponseWriter, r *http.Request, rp *Repo) {
	var body struct {
		Ref    string         `json:"ref"`
		Inputs map[string]any `json:"inputs"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		ghError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if body.Ref == "" {
		ghError(w, http.StatusUnprocessableEntity, "Invalid request.\n\n\"ref\" wasn't supplied.")
		return
	}
	file := r.PathValue("workflow")
	f.mu.Lock()
	wf := f.actions.workflows[strings.ToLower(rp.FullName)+"/"+file]
	f.mu.Unlock()
	if wf == nil {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	if len(body.Inputs) > 25 {
		ghError(w, http.StatusUnprocessableEntity, "you may only define up to 25 `inputs` for a `workflow_dispatch` event")
		return
	}
	inputs := map[string]string{}
	for k, v := range body.Inputs {
		s, ok := v.(string)
		if !ok {
			ghError(w, http.StatusUnprocessableEntity, "Invalid value for input "+strconv.Quote(k))
			return
		}
		declared := false
		for _, in := range wf.Inputs {
			declared = declared || in == k
		}
		if !declared {
			ghError(w, http.StatusUnprocessableEntity, "Unexpected inputs provided: ["+strconv.Quote(k)+"]")
			return
		}
		inputs[k] = s
	}
	fullRef := body.Ref
	if !strings.HasPrefix(fullRef, "refs/") {
		fullRef = "refs/heads/" + body.Ref
	}
	sha, err := resolveCommit(rp.GitDir, fullRef)
	if err != nil {
		ghError(w, http.StatusUnprocessableEntity, "No ref found for: "+body.Ref)
		return
	}
	e := entryOf(r.Context())
	f.mu.Lock()
	f.actions.dispatches = append(f.actions.dispatches, Dispatch{
		Repo: rp.FullName, RepoID: rp.ID, OwnerID: rp.OwnerID, Workflow: file, Ref: body.Ref,
		FullRef: fullRef, SHA: sha, Inputs: inputs, Installation: e.Installation,
	})
	f.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// ---- the Actions OIDC issuer ----

// OIDCIssuer is the issuer URL of the fake's Actions OIDC tokens (its
// discovery document is under /.well-known/openid-configuration).
func (f *Fake) OIDCIssuer() string { return f.URL + "/oidc" }

// OIDCKey is the issuer's signing key, for tests that forge tokens.
func (f *Fake) OIDCKey() *rsa.PrivateKey { return f.actions.key }

// OIDCKeyID is the kid of the issuer's signing key.
func (f *Fake) OIDCKeyID() string { return f.actions.kid }

func (f *Fake) oidcDiscovery(w http.ResponseWriter, _ *http.Request) {
	iss := f.OIDCIssuer()
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": iss, "jwks_uri": iss + "/.well-known/jwks",
		"subject_types_supported":               []string{"public", "pairwise"},
		"response_types_supported":              []string{"id_token"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"scopes_supported":                      []string{"openid"},
		"claims_supported": []string{"sub", "aud", "exp", "iat", "iss", "jti", "nbf", "ref", "sha", "repository",
			"repository_id", "repository_owner", "repository_owner_id", "run_id", "run_number", "run_attempt",
			"actor", "actor_id", "workflow", "workflow_ref", "workflow_sha", "job_workflow_ref", "job_workflow_sha",
			"head_ref", "base_ref", "event_name", "ref_type", "environment", "runner_environment"},
	})
}

func (f *Fake) oidcJWKS(w http.ResponseWriter, _ *http.Request) {
	jwk := jose.JSONWebKey{Key: &f.actions.key.PublicKey, KeyID: f.actions.kid, Algorithm: string(jose.RS256), Use: "sig"}
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{jwk}})
}

// StartWorkflowRun simulates GitHub starting a run of a dispatch: a new
// run ID, run attempt 1.
func (f *Fake) StartWorkflowRun(d Dispatch) WorkflowRun {
	return WorkflowRun{Dispatch: d, RunID: f.actions.nextRun.Add(1), RunAttempt: 1, Actor: "octocat"}
}

// OIDCClaims are the claims GitHub puts in the OIDC token of a job of run
// for audience, issued now: the documented set for a workflow_dispatch
// event. Tests change them and sign with SignOIDC to forge variants.
func (f *Fake) OIDCClaims(run WorkflowRun, audience string) map[string]any {
	now := f.clock.Now().Unix()
	owner := run.Repo[:strings.IndexByte(run.Repo, '/')]
	wfPath := run.Repo + "/.github/workflows/" + run.Workflow
	return map[string]any{
		"jti":                   "fake-" + strconv.FormatInt(f.actions.jti.Add(1), 10),
		"sub":                   "repo:" + run.Repo + ":ref:" + run.FullRef,
		"aud":                   audience,
		"ref":                   run.FullRef,
		"sha":                   run.SHA,
		"repository":            run.Repo,
		"repository_owner":      owner,
		"repository_owner_id":   strconv.FormatInt(run.OwnerID, 10),
		"repository_id":         strconv.FormatInt(run.RepoID, 10),
		"repository_visibility": "private",
		"run_id":                strconv.FormatInt(run.RunID, 10),
		"run_number":            "1",
		"run_attempt":           strconv.FormatInt(run.RunAttempt, 10),
		"actor":                 run.Actor,
		"actor_id":              "583231",
		"workflow":              "jobplane",
		"workflow_ref":          wfPath + "@" + run.FullRef,
		"workflow_sha":          run.SHA,
		"job_workflow_ref":      wfPath + "@" + run.FullRef,
		"job_workflow_sha":      run.SHA,
		"head_ref":              "",
		"base_ref":              "",
		"event_name":            "workflow_dispatch",
		"ref_type":              "branch",
		"runner_environment":    "github-hosted",
		"iss":                   f.OIDCIssuer(),
		"nbf":                   now - 10,
		"iat":                   now,
		"exp":                   now + int64(oidcTokenLifetime/time.Second),
	}
}

// OIDCToken is the token GitHub gives a job of run that asks for audience.
func (f *Fake) OIDCToken(run WorkflowRun, audience string) string {
	return f.SignOIDC(f.OIDCClaims(run, audience))
}

// SignOIDC signs claims with the issuer's key (RS256, the issuer's kid).
func (f *Fake) SignOIDC(claims map[string]any) string {
	return SignJWT(f.actions.key, jose.RS256, f.actions.kid, claims)
}

// SignJWT signs claims as a compact JWS with key under alg and kid; tests
// use it to forge tokens with other keys and algorithms.
func SignJWT(key any, alg jose.SignatureAlgorithm, kid string, claims map[string]any) string {
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		panic(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		panic(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		panic(err)
	}
	s, err := obj.CompactSerialize()
	if err != nil {
		panic(err)
	}
	return s
}

// RemoveWorkflow deletes a workflow file: dispatching it is then 404.
func (f *Fake) RemoveWorkflow(repo, file string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.actions.workflows, strings.ToLower(repo)+"/"+file)
}
