package api

import (
	"net/http"
	"strings"
	"testing"
)

func TestPrefersMinimal(t *testing.T) {
	for _, c := range []struct {
		headers []string
		want    bool
	}{
		{nil, false},
		{[]string{"return=minimal"}, true},
		{[]string{"RETURN=MINIMAL"}, true},
		{[]string{`return = "minimal"`}, true},
		{[]string{"return=minimal; foo=bar"}, true},
		{[]string{"respond-async, wait=10, return=minimal"}, true},
		{[]string{"respond-async", "return=minimal"}, true},
		{[]string{"return=representation"}, false},
		{[]string{"return=representation, return=minimal"}, false},
		{[]string{"return=minimal, return=representation"}, true},
		{[]string{"return"}, false},
		{[]string{"minimal"}, false},
		{[]string{"returns=minimal"}, false},
		{[]string{"return=minimalist"}, false},
		{[]string{"x-return=minimal"}, false},
		{[]string{""}, false},
	} {
		r, _ := http.NewRequest(http.MethodPost, "/v1/runs", nil)
		for _, h := range c.headers {
			r.Header.Add("Prefer", h)
		}
		if got := prefersMinimal(r); got != c.want {
			t.Errorf("Prefer %q: prefersMinimal = %v, want %v", c.headers, got, c.want)
		}
	}
}

// FuzzPrefersMinimal: any header is read without panicking, and a
// minimal preference placed first is honoured whatever follows it.
func FuzzPrefersMinimal(f *testing.F) {
	for _, s := range []string{"return=minimal", "respond-async, return=representation", `return="minimal";a=b`, ",,;=", "return=,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r, _ := http.NewRequest(http.MethodPost, "/v1/runs", nil)
		r.Header["Prefer"] = []string{h}
		got := prefersMinimal(r)
		if got && !strings.Contains(strings.ToLower(h), "minimal") {
			t.Fatalf("Prefer %q read as minimal", h)
		}
		r.Header["Prefer"] = []string{"return=minimal, " + h}
		if !prefersMinimal(r) {
			t.Fatalf("Prefer %q after return=minimal not read as minimal", h)
		}
	})
}
