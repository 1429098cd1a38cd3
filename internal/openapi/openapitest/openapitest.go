package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jobplane/jobplane/internal/openapi"
)

// maxCapture bounds the bytes of a body kept for checking; a longer body
// (a large artifact) is checked for status and headers only.
const maxCapture = 4 << 20

func init() {
	// Media types the document uses that kin-openapi does not know.
	openapi3filter.RegisterBodyDecoder("application/jwk-set+json", openapi3filter.JSONBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/gzip", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
}

// Checker checks exchanges against the document. It is safe for
// concurrent use.
type Checker struct {
	doc     *openapi3.T
	mux     *http.ServeMux
	problem *openapi3.Schema
}

// Load parses and validates the embedded document once per process.
var Load = sync.OnceValues(func() (*Checker, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.JSON())
	if err != nil {
		return nil, fmt.Errorf("load openapi document: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("validate openapi document: %w", err)
	}
	c := &Checker{doc: doc, mux: http.NewServeMux()}
	ps := doc.Components.Schemas["Problem"]
	if ps == nil || ps.Value == nil {
		return nil, errors.New("openapi document has no Problem schema")
	}
	c.problem = ps.Value
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			route := &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
			names := pathParams(path)
			// The server routes with net/http's ServeMux, and so does the
			// checker: a path matches an operation here exactly when it
			// reaches that handler there.
			c.mux.HandleFunc(method+" "+path, func(_ http.ResponseWriter, r *http.Request) {
				m, _ := r.Context().Value(matchKey{}).(*match)
				if m == nil {
					return
				}
				m.route = route
				m.params = make(map[string]string, len(names))
				for _, n := range names {
					m.params[n] = r.PathValue(n)
				}
			})
		}
	}
	return c, nil
})

// Operations lists the document's operations as ServeMux patterns
// ("METHOD /path"), sorted.
func (c *Checker) Operations() []string {
	var out []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

func pathParams(path string) []string {
	var out []string
	for seg := range strings.SplitSeq(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, strings.TrimSuffix(seg[1:], "}"))
		}
	}
	return out
}

type matchKey struct{}

type match struct {
	route  *routers.Route
	params map[string]string
}

// Route is the operation the document gives a request, or nil.
func (c *Checker) route(r *http.Request) *match {
	m := &match{}
	probe := r.Clone(context.WithValue(r.Context(), matchKey{}, m))
	probe.Body = http.NoBody
	c.mux.ServeHTTP(discard{header: http.Header{}}, probe)
	if m.route == nil {
		return nil
	}
	return m
}

type discard struct{ header http.Header }

func (d discard) Header() http.Header         { return d.header }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

// Exchange is one request and its answer as seen on the wire.
type Exchange struct {
	Request     *http.Request
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
	// Truncated is set when Body holds only the start of the answer.
	Truncated bool
}

// apiPath reports whether a path belongs to the API the document
// describes (the web UI's pages do not).
func apiPath(p string) bool {
	for _, pre := range []string{"/v1/", "/.well-known/"} {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	switch p {
	case "/v1", "/healthz", "/readyz", "/metrics":
		return true
	}
	return false
}

// Check returns what in the exchange the document does not allow, or nil.
func (c *Checker) Check(ctx context.Context, x *Exchange) error {
	r := x.Request
	m := c.route(r)
	if m == nil {
		if !apiPath(r.URL.Path) {
			return nil
		}
		return c.checkUnrouted(x)
	}
	in, reqErr := c.validateRequest(ctx, x, m)
	opts := in.Options
	ropts := *opts
	ropts.ExcludeResponseBody = x.Truncated
	resp := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: x.Status, Header: x.Header, Options: &ropts}
	resp.SetBodyBytes(x.Body)
	var errs []error
	if err := openapi3filter.ValidateResponse(ctx, resp); err != nil {
		errs = append(errs, fmt.Errorf("answer %d does not match the document: %s%s\nbody: %s", x.Status, brief(err), branches(m.route, x), clip(x.Body)))
	}
	if reqErr != nil && x.Status < 400 {
		errs = append(errs, fmt.Errorf("the server answered %d to a request the document forbids: %s\nrequest body: %s", x.Status, brief(reqErr), clip(x.RequestBody)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("openapi: %s %s (operation %s): %w", r.Method, r.URL.RequestURI(), m.route.Operation.OperationID, err)
	}
	return nil
}

func soleMediaType(op *openapi3.Operation) string {
	if op.RequestBody == nil || op.RequestBody.Value == nil || len(op.RequestBody.Value.Content) != 1 {
		return ""
	}
	for mt := range op.RequestBody.Value.Content {
		return mt
	}
	return ""
}

// branches explains a failed anyOf of a JSON answer, whose own error
// says only that no branch matched: why each one did not.
func branches(route *routers.Route, x *Exchange) string {
	ref := route.Operation.Responses.Status(x.Status)
	if ref == nil || ref.Value == nil {
		return ""
	}
	mt := ref.Value.Content.Get(x.Header.Get("Content-Type"))
	if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
		return ""
	}
	s := mt.Schema.Value
	alts := append(append([]*openapi3.SchemaRef{}, s.AnyOf...), s.OneOf...)
	if len(alts) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(x.Body, &v) != nil {
		return ""
	}
	var b strings.Builder
	for i, a := range alts {
		if err := a.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			name := a.Ref
			if name == "" {
				name = fmt.Sprintf("branch %d", i)
			}
			fmt.Fprintf(&b, "\n  not %s: %s", name, brief(err))
		}
	}
	return b.String()
}

// brief is a validation error without the schema and value dumps that
// kin-openapi appends: the reason, and where in the body.
func brief(err error) string {
	prefix, inner := "", err
	var re *openapi3filter.RequestError
	var pe *openapi3filter.ResponseError
	switch {
	case errors.As(err, &re) && re.Err != nil:
		prefix, inner = re.Reason, re.Err
		if re.Parameter != nil {
			prefix = fmt.Sprintf("parameter %s in %s: %s", re.Parameter.Name, re.Parameter.In, re.Reason)
		}
	case errors.As(err, &pe) && pe.Err != nil:
		prefix, inner = pe.Reason, pe.Err
	}
	msg := firstLine(inner.Error())
	var se *openapi3.SchemaError
	if errors.As(inner, &se) {
		msg = fmt.Sprintf("at /%s: %s", strings.Join(se.JSONPointer(), "/"), se.Reason)
	}
	// The JSON Schema 2020-12 validator's own error lists every failing
	// location; kin-openapi's summary of it names only the schema.
	var ve *jsonschema.ValidationError
	if errors.As(inner, &ve) {
		var at []string
		for l := range strings.Lines(ve.Error()) {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "- at ") {
				at = append(at, strings.TrimPrefix(l, "- "))
			}
		}
		if len(at) > 0 {
			msg = strings.Join(at, "; ")
		}
	}
	if prefix != "" {
		return prefix + ": " + msg
	}
	return msg
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func (c *Checker) validateRequest(ctx context.Context, x *Exchange, m *match) (*openapi3filter.RequestValidationInput, error) {
	r := x.Request
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true,
		AuthenticationFunc:    authenticate,
		// Defaults are the server's business; the check must not rewrite
		// the body it checks.
		SkipSettingDefaults: true,
	}
	req := r.Clone(ctx)
	if len(x.RequestBody) > 0 && req.Header.Get("Content-Type") == "" {
		// The server reads a body by its operation's media type whatever
		// Content-Type says, so a client that sends none is not refused;
		// check the body as that media type.
		if mt := soleMediaType(m.route.Operation); mt != "" {
			req.Header.Set("Content-Type", mt)
		}
	}
	req.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	req.GetBody = nil
	req.ContentLength = int64(len(x.RequestBody))
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: m.params, Route: m.route, Options: opts}
	return in, openapi3filter.ValidateRequest(ctx, in)
}

// CheckRequest returns what in the exchange's request the document does
// not allow, or nil; the answer is not looked at.
func (c *Checker) CheckRequest(ctx context.Context, x *Exchange) error {
	r := x.Request
	m := c.route(r)
	if m == nil {
		if !apiPath(r.URL.Path) {
			return nil
		}
		return fmt.Errorf("openapi: %s %s is in no operation of the document", r.Method, r.URL.RequestURI())
	}
	if _, err := c.validateRequest(ctx, x, m); err != nil {
		return fmt.Errorf("openapi: %s %s (operation %s): the request is not one the document allows: %s\nrequest body: %s",
			r.Method, r.URL.RequestURI(), m.route.Operation.OperationID, brief(err), clip(x.RequestBody))
	}
	return nil
}

// checkUnrouted checks the answer to an API path that no operation of the
// document has: the server must refuse it (404, 405; a runner path that is
// not canonical is 400) with a problem, or redirect a path that is not
// clean.
func (c *Checker) checkUnrouted(x *Exchange) error {
	r := x.Request
	switch x.Status {
	case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return nil
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed:
	default:
		return fmt.Errorf("openapi: %s %s is in no operation of the document, yet the server answered %d\nbody: %s",
			r.Method, r.URL.RequestURI(), x.Status, clip(x.Body))
	}
	if err := c.checkProblem(x); err != nil {
		return fmt.Errorf("openapi: %s %s (no operation): %w", r.Method, r.URL.RequestURI(), err)
	}
	return nil
}

func (c *Checker) checkProblem(x *Exchange) error {
	mt, _, _ := mime.ParseMediaType(x.Header.Get("Content-Type"))
	if mt != "application/problem+json" {
		return fmt.Errorf("refusal %d is %q, not application/problem+json", x.Status, mt)
	}
	var v any
	if err := json.Unmarshal(x.Body, &v); err != nil {
		return fmt.Errorf("refusal %d: %w", x.Status, err)
	}
	if err := c.problem.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("refusal %d is not a Problem: %w\nbody: %s", x.Status, err, clip(x.Body))
	}
	return nil
}

// authenticate checks that a request carries the credentials a security
// scheme names; whether they are valid is the server's to decide.
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r := in.RequestValidationInput.Request
	s := in.SecurityScheme
	switch {
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
			return nil
		}
		return in.NewError(errors.New("no bearer token"))
	case s.Type == "apiKey" && s.In == "header":
		if r.Header.Get(s.Name) != "" {
			return nil
		}
		return in.NewError(fmt.Errorf("no %s header", s.Name))
	}
	return in.NewError(fmt.Errorf("security scheme %q is not one the checker knows", in.SecuritySchemeName))
}

func clip(b []byte) string {
	const n = 600
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// Handler wraps h so that every exchange it serves is checked; a
// violation fails t (t.Errorf, which is safe from the server's goroutines).
func Handler(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	return HandlerAt(t, "", h)
}

// HandlerAt is Handler for an API served under a path prefix (a client
// test's base URL with a path): the check sees each path without prefix,
// h sees it as sent.
func HandlerAt(t testing.TB, prefix string, h http.Handler) http.Handler {
	t.Helper()
	return wrap(t, prefix, false, h)
}

// Requests wraps a fake server h whose answers are deliberately not the
// document's (a test of how a client copes with a broken server): only the
// requests the client sends are checked.
func Requests(t testing.TB, prefix string, h http.Handler) http.Handler {
	t.Helper()
	return wrap(t, prefix, true, h)
}

func wrap(t testing.TB, prefix string, requestsOnly bool, h http.Handler) http.Handler {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := &capture{max: maxCapture}
		if r.Body != nil && r.Body != http.NoBody {
			in.src = r.Body
			r.Body = in
		}
		req := r.Clone(r.Context())
		if prefix != "" {
			p, ok := strings.CutPrefix(req.URL.Path, prefix)
			if !ok {
				t.Errorf("openapi: %s %s is not under %s", r.Method, r.URL.Path, prefix)
			}
			req.URL.Path, req.URL.RawPath = p, ""
		}
		rw := &recorder{ResponseWriter: w, body: capture{max: maxCapture}}
		h.ServeHTTP(rw, r)
		if rw.status == 0 {
			rw.status = http.StatusOK
		}
		x := &Exchange{Request: req, RequestBody: in.buf.Bytes(), Status: rw.status, Header: rw.Header().Clone(),
			Body: rw.body.buf.Bytes(), Truncated: rw.body.over}
		check := c.Check
		if requestsOnly {
			check = c.CheckRequest
		}
		if err := check(context.WithoutCancel(r.Context()), x); err != nil {
			t.Errorf("%v", err)
		}
	})
}

// capture keeps the first max bytes that pass through it.
type capture struct {
	src  io.ReadCloser
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capture) keep(b []byte) {
	if room := c.max - c.buf.Len(); room < len(b) {
		c.over = true
		b = b[:max(room, 0)]
	}
	c.buf.Write(b)
}

func (c *capture) Read(p []byte) (int, error) {
	n, err := c.src.Read(p)
	c.keep(p[:n])
	return n, err
}

func (c *capture) Close() error { return c.src.Close() }

// recorder passes an answer through and keeps its status and body.
type recorder struct {
	http.ResponseWriter
	status int
	body   capture
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.keep(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (read
// deadlines of uploads).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Transport wraps base (nil: http.DefaultTransport) so that every exchange
// a client makes is checked, for servers that run in another process. The
// answer is checked when its body is closed.
func Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{t: t, c: c, base: base}
}

// Client is a copy of hc (nil: a new client) whose exchanges are checked.
func Client(t testing.TB, hc *http.Client) *http.Client {
	t.Helper()
	out := &http.Client{}
	if hc != nil {
		*out = *hc
	}
	out.Transport = Transport(t, out.Transport)
	return out
}

type transport struct {
	t    testing.TB
	c    *Checker
	base http.RoundTripper
}

func (tr *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := tr.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &checkedBody{capture: capture{src: resp.Body, max: maxCapture}, done: func(got []byte, over, complete bool) {
		x := &Exchange{Request: r, RequestBody: body, Status: resp.StatusCode, Header: resp.Header, Body: got, Truncated: over || !complete}
		if err := tr.c.Check(context.WithoutCancel(r.Context()), x); err != nil {
			tr.t.Errorf("%v", err)
		}
	}}
	return resp, nil
}

// checkedBody runs done once, when the body is closed, with what was read
// and whether all of it was.
type checkedBody struct {
	capture
	eof  bool
	once sync.Once
	done func(b []byte, over, complete bool)
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.capture.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *checkedBody) Close() error {
	err := b.capture.Close()
	b.once.Do(func() { b.done(b.buf.Bytes(), b.over, b.eof) })
	return err
}
