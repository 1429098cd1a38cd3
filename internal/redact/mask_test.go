package redact

import (
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestMask(t *testing.T) {
	m := NewMasker("s3cr3t-value", "abc", "", "s3cr3t") // "abc" too short
	require.Equal(t, "token=*** ok", m.Mask("token=s3cr3t-value ok"))
	require.Equal(t, "*** and ***", m.Mask("s3cr3t and s3cr3t-value"), "longest wins")
	require.Equal(t, "abc stays", m.Mask("abc stays"))
	b := base64.StdEncoding.EncodeToString([]byte("s3cr3t-value"))
	require.Equal(t, "auth ***", m.Mask("auth "+b))
	require.Equal(t, "nothing here", m.Mask("nothing here"))

	var nilMasker *Masker
	require.Equal(t, "x", nilMasker.Mask("x"))
	require.Equal(t, "s3cr3t", NewMasker().Mask("s3cr3t"))

	// A secret containing '*' that re-forms around a mask.
	m = NewMasker("a***", "XXXX")
	require.Equal(t, "***", m.Mask("aXXXX"))
}

func checkMasked(t *testing.T, secrets []string, out string) {
	for _, s := range secrets {
		if len(s) >= MinMaskLen {
			require.False(t, strings.Contains(out, s), "secret %q survives in %q", s, out)
			require.False(t, strings.Contains(out, base64.StdEncoding.EncodeToString([]byte(s))))
		}
	}
}

func FuzzMask(f *testing.F) {
	f.Add("s3cr3t", "xs3cr", "s3cr3ts3cr3t", "prefix ", " suffix")
	f.Add("a***", "XXXX", "aXXXX", "", "")
	f.Add("abcd", "cdef", "abcdef", "ab", "cd")
	f.Add("aaaa", "aaa", "aaaaaaa", "a", "a")
	f.Fuzz(func(t *testing.T, s1, s2, line, pre, post string) {
		secrets := []string{s1, s2}
		m := NewMasker(secrets...)
		for _, in := range []string{
			line,
			pre + s1 + post,
			pre + s1 + s2 + post,
			s2 + line + s1,
			pre + base64.StdEncoding.EncodeToString([]byte(s1)) + post,
		} {
			out := m.Mask(in)
			checkMasked(t, secrets, out)
			require.LessOrEqual(t, len(out), len(in), "masking never grows a line")
		}
	})
}

func BenchmarkMask(b *testing.B) {
	secrets := make([]string, 50)
	for i := range secrets {
		secrets[i] = strings.Repeat(string(rune('a'+i%26)), 8) + "-secret-" + string(rune('A'+i%26))
	}
	m := NewMasker(secrets...)
	line := "2026-03-01T12:00:00Z INFO connecting to db host=pg.internal user=app password=" + secrets[7] + " done"
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Mask(line)
	}
}

// TestSafeCut: no masked text straddles the cut SafeCut returns, so the
// two sides masked apart hide everything.
func TestSafeCut(t *testing.T) {
	secret := "hunter2-very-secret"
	m := NewMasker(secret)
	for at := 0; at <= 40; at++ {
		s := strings.Repeat("x", 10) + secret + strings.Repeat("é", 5)
		cut := m.SafeCut(s, at)
		require.LessOrEqual(t, cut, at)
		require.True(t, utf8.ValidString(s[:cut]) && utf8.ValidString(s[cut:]), "cut %d on a rune boundary", cut)
		joined := m.Mask(s[:cut]) + m.Mask(s[cut:])
		require.Equal(t, m.Mask(s), joined, "cut at %d (asked %d)", cut, at)
	}
	require.Equal(t, 7, (*Masker)(nil).SafeCut("abcdefghij", 7))
	require.Equal(t, len(base64.StdEncoding.EncodeToString([]byte(secret))), m.Longest())
}
