package protocol_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

func TestNULField(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		`{"job":"x","params":{"account":"a\u0000b"}}`:     "params/account",
		`{"reason":"\u0000"}`:                             "reason",
		`{"labels":["ok","bad\u0000"]}`:                   "labels/1",
		`{"params":{"k\u0000":1}}`:                        "params/k\u0000",
		`{"a":{"b":[1,{"c":"x"}],"d":"\u0000"}}`:          "a/d",
		`{"a":[[1],[2,"\u0000"]]}`:                        "a/1/1",
		`{"a":"ok","b":{"c":true,"d":null},"e":"\u0000"}`: "e",
	} {
		got, ok := protocol.NULField([]byte(doc))
		require.True(t, ok, doc)
		require.Equal(t, want, got, doc)
	}
	for _, doc := range []string{`{"a":"\\u0000"}`, `{"a":"b"}`, `[]`, `not json \u0000`} {
		_, ok := protocol.NULField([]byte(doc))
		require.False(t, ok, doc)
	}
	require.Equal(t, "a\uFFFDb", protocol.StorableText("a\x00b"))
}

func FuzzNULField(f *testing.F) {
	f.Add([]byte(`{"a":"\u0000"}`))
	f.Add([]byte(`{"a":[{"b":"c"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		_, _ = protocol.NULField(doc) // never panics
	})
}
