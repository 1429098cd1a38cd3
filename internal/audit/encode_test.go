package audit_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/store"
)

func vectorEvent() *store.AuditEvent {
	return &store.AuditEvent{
		Seq: 42, Tenant: "ten_01", At: time.Date(2026, 8, 14, 12, 30, 0, 123456789, time.UTC),
		Actor: "alice", Action: "run.requested", Subject: "run_01",
		Details: json.RawMessage(`{"z": [1, 2.50, "x\u0001"], "a": {"é": true, "b": null}, "q": "\"<&>\\"}`),
	}
}

// TestEncodeVector pins the canonical encoding and the link hash (K): a
// change to either breaks every chain already stored. The hash was checked
// with `printf "jobplane-audit-v1\n%s\n%s" GENESIS ENCODING | sha256sum`.
func TestEncodeVector(t *testing.T) {
	t.Parallel()
	e := vectorEvent()
	got := string(audit.Encode(e))
	want := `{"seq":42,"tenant":"ten_01","at_us":1786710600123456,"actor":"alice","action":"run.requested","subject":"run_01","details":{"a":{"b":null,"é":true},"q":"\"<&>\\","z":[1,2.50,"x\u0001"]}}`
	require.Equal(t, want, got, "Encode(vector)")
	require.Equal(t, "8afca3a2c1081cd45a292381522a0e3af89b73c84e238020a7c1dc0e2d6020c4", audit.Link(audit.Genesis, e), "Link(Genesis, vector)")
}

func TestEncodeIgnoresStorageFormatting(t *testing.T) {
	t.Parallel()
	a, b := vectorEvent(), vectorEvent()
	// How PostgreSQL's jsonb prints the same value: other spacing, other key order.
	b.Details = json.RawMessage(`{"a": {"b": null, "é": true}, "q": "\"<&>\\", "z": [1, 2.50, "x\u0001"]}`)
	require.Equal(t, string(audit.Encode(a)), string(audit.Encode(b)))
	for name, mutate := range map[string]func(e *store.AuditEvent){
		"seq":     func(e *store.AuditEvent) { e.Seq++ },
		"tenant":  func(e *store.AuditEvent) { e.Tenant = "ten_02" },
		"at":      func(e *store.AuditEvent) { e.At = e.At.Add(time.Microsecond) },
		"actor":   func(e *store.AuditEvent) { e.Actor = "alicf" },
		"action":  func(e *store.AuditEvent) { e.Action = "run.approved" },
		"subject": func(e *store.AuditEvent) { e.Subject = "run_02" },
		"details": func(e *store.AuditEvent) { e.Details = json.RawMessage(`{"a":1}`) },
		"number": func(e *store.AuditEvent) {
			e.Details = json.RawMessage(`{"z":[1,2.5,"x\u0001"],"a":{"é":true,"b":null},"q":"\"<&>\\"}`)
		},
		"garbage": func(e *store.AuditEvent) { e.Details = json.RawMessage(`{not json`) },
	} {
		c := vectorEvent()
		mutate(c)
		require.NotEqual(t, audit.Link(audit.Genesis, a), audit.Link(audit.Genesis, c), "changing %s must change the hash", name)
	}
}

func TestParseCheckpoint(t *testing.T) {
	t.Parallel()
	h := audit.Link(audit.Genesis, vectorEvent())
	cp, err := audit.ParseCheckpoint("42:" + h)
	require.NoError(t, err)
	require.Equal(t, audit.Checkpoint{Seq: 42, Hash: h}, cp)
	require.Equal(t, "42:"+h, cp.String())
	for _, bad := range []string{"", "42", ":" + h, "0:" + h, "-1:" + h, "x:" + h, "42:" + h[:63], "42:" + h + "0", "42:" + "G" + h[1:]} {
		_, err := audit.ParseCheckpoint(bad)
		require.Error(t, err, "ParseCheckpoint(%q)", bad)
	}
}

// FuzzEncode: any stored details encode to valid JSON, and the encoding is
// a fixpoint (encoding the canonical details again changes nothing).
func FuzzEncode(f *testing.F) {
	f.Add(`{"a":1}`, "alice")
	f.Add(`[1,"\u2028",{"b":[]}]`, "\x00\xff")
	f.Add(`{"a":1,"a":2}`, "é")
	f.Fuzz(func(t *testing.T, details, actor string) {
		e := &store.AuditEvent{Seq: 1, Actor: actor, Details: json.RawMessage(details)}
		enc := audit.Encode(e)
		var v struct {
			Details json.RawMessage `json:"details"`
		}
		if err := json.Unmarshal(enc, &v); err != nil {
			t.Fatalf("Encode(%q) = %q, not JSON: %v", details, enc, err)
		}
		e2 := *e
		e2.Details = v.Details
		if got := audit.Encode(&e2); string(got) != string(enc) {
			t.Fatalf("not a fixpoint:\n%s\n%s", enc, got)
		}
	})
}

// FuzzParseCheckpoint: the ?checkpoint= query and --checkpoint flag never
// panic, and what parses prints back as itself.
func FuzzParseCheckpoint(f *testing.F) {
	f.Add("42:" + audit.Genesis)
	f.Add("1:" + strings.Repeat("G", 64))
	f.Add(" 9:" + audit.Genesis + " ")
	f.Fuzz(func(t *testing.T, s string) {
		cp, err := audit.ParseCheckpoint(s)
		if err != nil {
			return
		}
		again, err := audit.ParseCheckpoint(cp.String())
		if err != nil || again != cp {
			t.Fatalf("ParseCheckpoint(%q) = %v, which does not round-trip", s, cp)
		}
	})
}

// FuzzDetailsCanonical: the in-place canonical form of details is, byte
// for byte, the one decoding them gives (the encoding every chain so far
// was linked with), for any input, JSON or not.
func FuzzDetailsCanonical(f *testing.F) {
	for _, s := range []string{
		`{"z": [1, 2.50, "x\u0001"], "a": {"é": true, "b": null}, "q": "\"<&>\\"}`,
		`{"a":1,"a":2,"\u0061":3}`, `[]`, `{}`, ` [ 1e5 , -0.0, 1E+2 ] `, `"\ud83d\ude00 \udc00"`,
		"\"\xff\xfe\"", `{"b":{"d":[{"c":1,"a":[]}]},"a":"x"}`, `nul`, `{"a":1} x`, `{"a":1} }`, `1 2`,
		`{"k":"\u2028\/"}`, `  `, `true`, `{"":0," ":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		fast, decoded := audit.DetailsPaths(raw)
		if fast != decoded {
			t.Fatalf("details %q:\nin place %s\ndecoded  %s", raw, fast, decoded)
		}
	})
}
