package policy

import (
	"fmt"
	"reflect"
	"sync"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
)

// Budgets that keep every `when` cheap and every evaluation finite, whatever
// a commit or a request contains.
const (
	// MaxWhenLength is the longest `when` accepted, in bytes.
	MaxWhenLength = 4096
	// costLimit bounds one evaluation (roughly one unit per operation or
	// per element visited); a comprehension over a huge parameter list
	// stops with an error, which counts as false.
	costLimit = 100_000
	// interruptEvery makes comprehensions check the cost budget often.
	interruptEvery = 100
)

// The CEL view of a request. These are native Go structs rather than maps so
// that a misspelled top-level field (request.chanel, actor.nmae) is a type
// error when the commit is validated, not a silent false at run time. Only
// the free-form parts (params, source, attributes) are maps, where a
// misspelled key can only be found at evaluation.
type celRef struct {
	Branch    string `cel:"branch"`
	Protected bool   `cel:"protected"`
	Commit    string `cel:"commit"`
}

type celRequest struct {
	Job     string         `cel:"job"`
	Channel string         `cel:"channel"`
	Params  map[string]any `cel:"params"`
	Ref     celRef         `cel:"ref"`
	Source  map[string]any `cel:"source"`
}

type celActor struct {
	Name   string   `cel:"name"`
	Kind   string   `cel:"kind"`
	Groups []string `cel:"groups"`
}

type celGroup struct {
	Members    []string       `cel:"members"`
	Attributes map[string]any `cel:"attributes"`
}

var (
	envOnce sync.Once
	celEnv  *cel.Env
	envErr  error
)

// environment is shared by every catalog: a cel.Env is immutable and safe for
// concurrent use once built, and building one costs more than compiling a
// rule.
func environment() (*cel.Env, error) {
	envOnce.Do(func() {
		celEnv, envErr = cel.NewEnv(
			ext.NativeTypes(reflect.TypeFor[celRequest](), reflect.TypeFor[celActor](), reflect.TypeFor[celGroup](), ext.ParseStructTags(true)),
			cel.Variable("request", cel.ObjectType("policy.celRequest")),
			cel.Variable("actor", cel.ObjectType("policy.celActor")),
			cel.Variable("groups", cel.MapType(cel.StringType, cel.ObjectType("policy.celGroup"))),
			cel.Variable("now", cel.TimestampType),
			// Timestamp functions without a zone argument use UTC, not the
			// server's zone, so a decision does not depend on the host.
			cel.DefaultUTCTimeZone(true),
			cel.CrossTypeNumericComparisons(true),
		)
	})
	return celEnv, envErr
}

// compileWhen type-checks src and plans it. Problems carry the 1-based line
// and column inside src.
func compileWhen(src string) (prg cel.Program, probs []Problem) {
	defer func() {
		// A bug in the CEL front end on some input must cost this rule, not
		// the process; the rule does not validate, so it never grants.
		if r := recover(); r != nil {
			prg, probs = nil, []Problem{{Field: "when", Message: fmt.Sprintf("cannot compile: %v", r)}}
		}
	}()
	switch {
	case len(src) > MaxWhenLength:
		return nil, []Problem{{Field: "when", Message: fmt.Sprintf("is longer than %d bytes", MaxWhenLength)}}
	case !utf8.ValidString(src):
		return nil, []Problem{{Field: "when", Message: "is not valid UTF-8"}}
	}
	env, err := environment()
	if err != nil {
		return nil, []Problem{{Field: "when", Message: "CEL environment: " + err.Error()}}
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		for i, e := range iss.Errors() {
			if i == 3 {
				break // later errors are usually echoes of the first ones
			}
			p := Problem{Field: "when", Message: e.Message}
			if loc := e.Location; loc != nil && loc.Line() > 0 {
				p.Line, p.Column = loc.Line(), loc.Column()+1 // CEL columns are 0-based
			}
			probs = append(probs, p)
		}
		return nil, probs
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, []Problem{{Field: "when", Message: fmt.Sprintf("must be a boolean expression, this one is %s", t)}}
	}
	prg, err = env.Program(ast, cel.CostLimit(costLimit), cel.InterruptCheckFrequency(interruptEvery))
	if err != nil {
		return nil, []Problem{{Field: "when", Message: err.Error()}}
	}
	return prg, nil
}

// activation resolves the four CEL variables of one decision. It is built once
// per decision, lazily on the first `when` evaluated, and shared by every rule.
type activation struct {
	request, actor, groups, now ref.Val
}

var _ interpreter.Activation = (*activation)(nil)

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "request":
		return a.request, true
	case "actor":
		return a.actor, true
	case "groups":
		return a.groups, true
	case "now":
		return a.now, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

func newActivation(adapter types.Adapter, groups ref.Val, req *Request, actorGroups []string) *activation {
	params, source := req.Params, req.Source
	// Absent maps are empty maps in CEL, so `"x" in request.params` is false
	// rather than an error.
	if params == nil {
		params = map[string]any{}
	}
	if source == nil {
		source = map[string]any{}
	}
	if actorGroups == nil {
		actorGroups = []string{}
	}
	return &activation{
		request: adapter.NativeToValue(&celRequest{
			Job: req.Job, Channel: req.Channel, Params: params, Source: source,
			Ref: celRef{Branch: req.Ref.Branch, Protected: req.Ref.Protected, Commit: req.Ref.Commit},
		}),
		actor:  adapter.NativeToValue(&celActor{Name: req.Actor, Kind: req.ActorKind, Groups: actorGroups}),
		groups: groups,
		now:    types.Timestamp{Time: req.Now.UTC()},
	}
}

func groupsValue(adapter types.Adapter, groups []Group) ref.Val {
	m := make(map[string]celGroup, len(groups))
	for _, g := range groups {
		members, attrs := g.Members, g.Attributes
		if members == nil {
			members = []string{}
		}
		if attrs == nil {
			attrs = map[string]any{}
		}
		m[g.Name] = celGroup{Members: members, Attributes: attrs}
	}
	return adapter.NativeToValue(m)
}

// evalWhen runs a compiled condition. It never panics: any failure is an
// error, which the caller treats as false.
func evalWhen(prg cel.Program, act *activation) (ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			ok, err = false, fmt.Errorf("evaluation failed: %v", r)
		}
	}()
	out, _, err := prg.Eval(act)
	if err != nil {
		return false, err
	}
	b, isBool := out.Value().(bool)
	if !isBool {
		return false, fmt.Errorf("result is %s, not a bool", out.Type().TypeName())
	}
	return b, nil
}
