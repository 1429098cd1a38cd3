package fakegithub

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/github"
)

var (
	checkStatuses    = []string{"queued", "in_progress", "completed", "waiting", "requested", "pending"}
	checkConclusions = []string{"action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"}
)

type checkBody struct {
	Name        *string             `json:"name"`
	HeadSHA     *string             `json:"head_sha"`
	Status      string              `json:"status"`
	Conclusion  string              `json:"conclusion"`
	ExternalID  string              `json:"external_id"`
	DetailsURL  string              `json:"details_url"`
	StartedAt   *time.Time          `json:"started_at"`
	CompletedAt *time.Time          `json:"completed_at"`
	Output      *github.CheckOutput `json:"output"`
}

// validate applies GitHub's rules: known status and conclusion; a
// conclusion makes the run completed; completed needs a conclusion.
func (b *checkBody) validate() string {
	if b.Status != "" && !slices.Contains(checkStatuses, b.Status) {
		return "Invalid request.\n\nstatus is not included in the list"
	}
	if b.Conclusion != "" && !slices.Contains(checkConclusions, b.Conclusion) {
		return "Invalid request.\n\nconclusion is not included in the list"
	}
	if b.Conclusion != "" {
		b.Status = "completed"
	}
	if b.Status == "completed" && b.Conclusion == "" {
		return "Invalid request.\n\n\"conclusion\" wasn't supplied."
	}
	if b.Output != nil && (b.Output.Title == "" || b.Output.Summary == "") {
		return "Invalid request.\n\noutput requires title and summary"
	}
	return ""
}

func decodeCheck(w http.ResponseWriter, r *http.Request) (*checkBody, bool) {
	b := &checkBody{}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(b); err != nil {
		ghError(w, http.StatusBadRequest, "Problems parsing JSON")
		return nil, false
	}
	if msg := b.validate(); msg != "" {
		ghError(w, http.StatusUnprocessableEntity, msg)
		return nil, false
	}
	return b, true
}

func (f *Fake) createCheckRun(w http.ResponseWriter, r *http.Request, rp *Repo) {
	b, ok := decodeCheck(w, r)
	if !ok {
		return
	}
	if b.Name == nil || *b.Name == "" || b.HeadSHA == nil {
		ghError(w, http.StatusUnprocessableEntity, "Invalid request.\n\n\"name\" and \"head_sha\" weren't supplied.")
		return
	}
	if sha, err := resolveCommit(rp.GitDir, *b.HeadSHA); err != nil || sha != *b.HeadSHA {
		ghError(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+*b.HeadSHA)
		return
	}
	if b.Status == "" {
		b.Status = "queued"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	cr := &checkRun{repo: rp.FullName, run: github.CheckRun{ID: f.nextID, Name: *b.Name, HeadSHA: *b.HeadSHA, ExternalID: b.ExternalID}}
	f.apply(cr, b)
	f.checkRuns[cr.run.ID] = cr
	writeJSON(w, http.StatusCreated, cr.run)
}

// apply writes an accepted body into a run, stamping times as GitHub does.
func (f *Fake) apply(cr *checkRun, b *checkBody) {
	now := f.clock.Now().UTC().Truncate(time.Second)
	if b.Status != "" && (len(cr.history) == 0 || cr.history[len(cr.history)-1] != b.Status) {
		cr.history = append(cr.history, b.Status)
	}
	if b.Status != "" {
		cr.run.Status = b.Status
	}
	if b.Conclusion != "" {
		cr.run.Conclusion = b.Conclusion
	}
	if b.DetailsURL != "" {
		cr.run.DetailsURL = b.DetailsURL
	}
	if b.Output != nil {
		o := *b.Output
		cr.run.Output = &o
	}
	switch {
	case b.StartedAt != nil:
		cr.run.StartedAt = b.StartedAt
	case cr.run.StartedAt == nil:
		cr.run.StartedAt = &now
	}
	if cr.run.Status == "completed" {
		switch {
		case b.CompletedAt != nil:
			cr.run.CompletedAt = b.CompletedAt
		case cr.run.CompletedAt == nil:
			cr.run.CompletedAt = &now
		}
	}
}

func (f *Fake) lookupCheck(w http.ResponseWriter, r *http.Request, rp *Repo) *checkRun {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		ghError(w, http.StatusNotFound, "Not Found")
		return nil
	}
	cr := f.checkRuns[id]
	if cr == nil || cr.repo != rp.FullName {
		ghError(w, http.StatusNotFound, "Not Found")
		return nil
	}
	return cr
}

func (f *Fake) updateCheckRun(w http.ResponseWriter, r *http.Request, rp *Repo) {
	b, ok := decodeCheck(w, r)
	if !ok {
		return
	}
	if b.Name != nil || b.HeadSHA != nil {
		ghError(w, http.StatusUnprocessableEntity, "Invalid request.\n\nhead_sha cannot be changed")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cr := f.lookupCheck(w, r, rp)
	if cr == nil {
		return
	}
	// Stricter than GitHub, which lets a completed run be reopened: jobplane
	// never means to, so the fake treats it as the bug it would be.
	if cr.run.Status == "completed" && b.Status != "" && b.Status != "completed" {
		ghError(w, http.StatusUnprocessableEntity, "Invalid request.\n\na completed check run cannot go back to "+b.Status)
		return
	}
	f.apply(cr, b)
	writeJSON(w, http.StatusOK, cr.run)
}

func (f *Fake) getCheckRun(w http.ResponseWriter, r *http.Request, rp *Repo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cr := f.lookupCheck(w, r, rp); cr != nil {
		writeJSON(w, http.StatusOK, cr.run)
	}
}

func (f *Fake) listCheckRuns(w http.ResponseWriter, r *http.Request, rp *Repo) {
	sha, err := resolveCommit(rp.GitDir, r.PathValue("ref"))
	if err != nil {
		ghError(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+r.PathValue("ref"))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var runs []github.CheckRun
	for _, cr := range f.checkRuns {
		if cr.repo == rp.FullName && strings.EqualFold(cr.run.HeadSHA, sha) {
			runs = append(runs, cr.run)
		}
	}
	slices.SortFunc(runs, func(a, b github.CheckRun) int { return int(a.ID - b.ID) })
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(runs), "check_runs": runs})
}
