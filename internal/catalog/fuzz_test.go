package catalog

import (
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add("jobs/hello.yaml", minimalJob)
	f.Add("jobs/backfill-account.yaml", fullJob)
	f.Add("groups.yaml", fullGroups)
	f.Add("policies/a.yaml", decidePolicyA)
	f.Add("policies/b.yaml", decidePolicyB)
	f.Add("jobs/hello.yaml", "a: &a [*a]\n")
	f.Add("jobs/hello.yaml", "name: !!binary aGk=\n")
	f.Add("jobs/hello.yaml", "{{{{[[[[")
	f.Add("jobs/hello.yaml", "? [a]\n: b\n")
	f.Add("groups.yaml", "groups: {g: {attributes: {a: .inf, b: .nan, c: 0x10}}}\n")
	f.Add("policies/x.yaml", "rules: [{id: x, jobs: ['['], users: [~]}]\n")
	f.Add("jobs/hello.yaml", "name: hello\nparams: {type: object, properties: {a: {$ref: '#/x'}}}\nrun: {command: [x]}\n")
	f.Add("jobs/hello.yaml", "\t- x\n")
	f.Add("jobs/hello.yaml", "name: hello\nisolation: required\nrun: {command: [x], image: 'ghcr.io/a/b:1', resources: {cpu: 0.5, memory: 1Gi}, network: none, workdir: /w}\n")
	f.Add("tests/a.yaml", policyTests)
	f.Add("tests/a.yaml", "tests: [{name: x, request: {actor: a, job: hello, channel: prod, params: {a: [1, {b: .inf}]}, now: yesterday, ref: {protected: 1}}, expect: maybe, grants: {w: admin}}]\n")
	f.Add("tests/a.yaml", "tests: {name: x}\n")
	f.Fuzz(func(t *testing.T, path, content string) {
		c, errs := Parse(map[string][]byte{path: []byte(content)})
		if c == nil && len(errs) == 0 {
			t.Fatalf("Parse(%q) returned neither a catalog nor errors", content)
		}
		if c != nil && len(errs) > 0 {
			t.Fatalf("Parse(%q) returned a catalog and errors", content)
		}
		if c != nil {
			for _, j := range c.Jobs() {
				_, _ = j.ValidateParams(nil)
			}
			_ = c.Decide(Request{Job: "hello", Channel: "prod", Actor: "alice"})
		}
		for _, e := range errs {
			if strings.Contains(e.Message, "internal error") {
				t.Fatalf("Parse(%q) hit a recovered panic: %v", content, e)
			}
			if e.File == "" || e.Message == "" {
				t.Fatalf("error without file or message: %+v", e)
			}
		}
	})
}
