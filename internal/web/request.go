package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/protocol"
)

// field is one input of the request form, generated from one property of
// the job's parameter schema.
type field struct {
	Name        string
	Kind        string // text | integer | number | boolean | select | json
	Description string
	Required    bool
	Enum        []string
	Default     string
	Pattern     string
	Min, Max    string
	MinLength   string
	MaxLength   string
	Value       string
	Checked     bool
	Error       string
}

type requestData struct {
	Channels []string
	Channel  string
	Ref      string
	Jobs     []protocol.JobInfo
	Job      *protocol.JobView
	Fields   []*field
	Reason   string
	Key      string // idempotency key of this form: a double submit makes one run
	CSRF     string
	Problem  *problem
}

func (h *Handler) channels(r *http.Request, s *session) ([]string, error) {
	cv, err := h.cats.Catalogs(r.Context(), s.Actor)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cv.Channels {
		out = append(out, c.Channel)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (h *Handler) requestForm(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.requestData(r, s, r.URL.Query())
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	h.render(w, r, http.StatusOK, "request", view{Title: "Request a run", Nav: "request", Sess: s, Data: d})
}

func (h *Handler) requestData(r *http.Request, s *session, q url.Values) (*requestData, error) {
	d := &requestData{Channel: q.Get("channel"), Ref: q.Get("ref"), CSRF: s.CSRF, Key: "web-" + randomToken(), Reason: q.Get("reason")}
	chans, err := h.channels(r, s)
	if err != nil {
		return nil, err
	}
	d.Channels = chans
	if d.Channel == "" && len(chans) > 0 {
		d.Channel = chans[0]
	}
	if d.Channel == "" {
		return d, nil
	}
	jobs, err := h.cats.ListJobs(r.Context(), s.Actor, d.Channel, q.Get("ref"))
	if err != nil {
		return nil, err
	}
	// Offer only the jobs the policies let this user run (with default
	// parameters); the server still decides the request itself.
	for _, j := range jobs.Jobs {
		jv, err := h.cats.ShowJob(r.Context(), s.Actor, d.Channel, q.Get("ref"), j.Name)
		if err != nil {
			return nil, err
		}
		if mayRun(jv.MayRun, s.Actor.Name, jv.ActorNamed) {
			d.Jobs = append(d.Jobs, j)
		}
	}
	if name := q.Get("job"); name != "" {
		jv, err := h.cats.ShowJob(r.Context(), s.Actor, d.Channel, q.Get("ref"), name)
		if err != nil {
			return nil, err
		}
		d.Job = jv
		d.Fields, err = schemaFields(jv.Definition)
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// schemaFields turns the params schema of a job definition into inputs,
// in the order the schema lists its properties.
func schemaFields(definition json.RawMessage) ([]*field, error) {
	var def struct {
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(definition, &def); err != nil || len(def.Params) == 0 {
		return nil, nil
	}
	var schema struct {
		Required   []string        `json:"required"`
		Properties json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(def.Params, &schema); err != nil {
		return nil, fmt.Errorf("read params schema: %w", err)
	}
	names, err := objectKeys(schema.Properties)
	if err != nil {
		return nil, err
	}
	var props map[string]struct {
		Type        any               `json:"type"`
		Description string            `json:"description"`
		Enum        []json.RawMessage `json:"enum"`
		Default     json.RawMessage   `json:"default"`
		Pattern     string            `json:"pattern"`
		Minimum     *float64          `json:"minimum"`
		Maximum     *float64          `json:"maximum"`
		MinLength   *int              `json:"minLength"`
		MaxLength   *int              `json:"maxLength"`
	}
	if err := json.Unmarshal(schema.Properties, &props); err != nil {
		return nil, fmt.Errorf("read params schema: %w", err)
	}
	var out []*field
	for _, name := range names {
		p := props[name]
		f := &field{Name: name, Description: p.Description, Required: slices.Contains(schema.Required, name), Pattern: p.Pattern}
		typ, _ := p.Type.(string)
		switch typ {
		case "string":
			f.Kind = "text"
		case "integer", "number", "boolean":
			f.Kind = typ
		default:
			f.Kind = "json"
		}
		if p.Minimum != nil {
			f.Min = strconv.FormatFloat(*p.Minimum, 'f', -1, 64)
		}
		if p.Maximum != nil {
			f.Max = strconv.FormatFloat(*p.Maximum, 'f', -1, 64)
		}
		if p.MinLength != nil {
			f.MinLength = strconv.Itoa(*p.MinLength)
		}
		if p.MaxLength != nil {
			f.MaxLength = strconv.Itoa(*p.MaxLength)
		}
		if len(p.Default) > 0 {
			f.Default = inputText(p.Default)
			f.Value = f.Default
			f.Checked = string(p.Default) == "true"
		}
		if len(p.Enum) > 0 && f.Kind != "boolean" && f.Kind != "json" {
			f.Kind = "select:" + f.Kind
			for _, e := range p.Enum {
				f.Enum = append(f.Enum, inputText(e))
			}
		}
		if f.Description != "" && !strings.ContainsAny(f.Description[len(f.Description)-1:], ".!?") {
			f.Description += "."
		}
		out = append(out, f)
	}
	// Required fields first; otherwise the order the definition keeps.
	slices.SortStableFunc(out, func(a, b *field) int {
		switch {
		case a.Required == b.Required:
			return 0
		case a.Required:
			return -1
		}
		return 1
	})
	return out, nil
}

// inputText is a JSON value as a form input shows it: strings bare, the
// rest as JSON.
func inputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// objectKeys lists a JSON object's keys in document order.
func objectKeys(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("params schema: properties is not an object")
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, t.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// formParams builds the params object from the posted fields, typed by the
// schema; a value that cannot be read as its type is a field error shown
// next to its input.
func formParams(fields []*field, form url.Values) (json.RawMessage, bool) {
	params := map[string]any{}
	ok := true
	for _, f := range fields {
		v := form.Get("p." + f.Name)
		f.Value = v
		kind := strings.TrimPrefix(f.Kind, "select:")
		if kind == "boolean" {
			f.Checked = v != ""
			params[f.Name] = f.Checked
			continue
		}
		if v == "" {
			continue // absent: the schema's default or its required check applies
		}
		switch kind {
		case "text":
			params[f.Name] = v
		case "integer":
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				f.Error, ok = "must be a whole number", false
				continue
			}
			params[f.Name] = n
		case "number":
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				f.Error, ok = "must be a number", false
				continue
			}
			params[f.Name] = n
		default:
			var x any
			if err := json.Unmarshal([]byte(v), &x); err != nil {
				f.Error, ok = "must be JSON: "+err.Error(), false
				continue
			}
			params[f.Name] = x
		}
	}
	b, _ := json.Marshal(params)
	return b, ok
}

func (h *Handler) requestSubmit(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.requestData(r, s, r.PostForm)
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	if d.Job == nil {
		h.renderError(w, r, s, fmt.Errorf("choose a job: %w", protocol.ErrBadRequest))
		return
	}
	params, ok := formParams(d.Fields, r.PostForm)
	if !ok {
		h.render(w, r, http.StatusUnprocessableEntity, "request", view{Title: "Request a run", Nav: "request", Sess: s, Data: d})
		return
	}
	v, _, err := h.svc.RequestRunFrom(r.Context(), s.Actor, &protocol.RunRequest{Job: d.Job.Name, Channel: d.Channel,
		Ref: r.PostFormValue("ref"), Params: params, Reason: r.PostFormValue("reason"), IdempotencyKey: r.PostFormValue("key")},
		control.RequestOrigin{Source: map[string]any{"kind": "web"}})
	if err != nil {
		p := toProblem(h.log, err)
		d.Problem = &p
		var fe *protocol.FieldError
		if errors.As(err, &fe) {
			name := strings.TrimPrefix(strings.TrimPrefix(fe.Field, "params."), "/")
			for _, f := range d.Fields {
				if f.Name == name {
					f.Error = p.Detail
				}
			}
		}
		h.render(w, r, p.Status, "request", view{Title: "Request a run", Nav: "request", Sess: s, Data: d})
		return
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(v.Run.ID)+"?notice=requested", http.StatusSeeOther)
}

// mayRun reports whether name is among the principals a job's policies
// allow: by name, or as "any other authenticated principal" ("*") when the
// definitions do not name them at all.
func mayRun(access []protocol.PrincipalAccess, name string, named bool) bool {
	for _, a := range access {
		if a.Principal == name || (a.Principal == "*" && !named) {
			return true
		}
	}
	return false
}
