package redact

import (
	"cmp"
	"encoding/base64"
	"slices"
	"strings"
	"unicode/utf8"
)

const (
	// MinMaskLen is the shortest value the Masker masks. Shorter values
	// ("1", "yes") would shred ordinary log text while protecting nothing:
	// a secret that short is guessable anyway.
	MinMaskLen = 4
	// MaskText replaces every masked occurrence.
	MaskText = "***"
)

// Masker replaces secret values in log lines with "***".
//
// It masks each value (of at least MinMaskLen bytes) and its standard base64
// encoding, padded and unpadded (the common "echo $X | base64" and Basic-auth
// leak). It does not mask other transforms (URL-encoding, hex, base64 of a
// value embedded mid-stream at another alignment, a value split across two
// Mask calls): masking is a safety net for accidents, not a boundary against
// a job that wants to exfiltrate its own secrets. Callers should mask whole
// lines, not arbitrary chunks.
//
// A Masker is immutable and safe for concurrent use.
type Masker struct {
	r    *strings.Replacer
	olds []string // longest first
}

// NewMasker builds a Masker for values.
func NewMasker(values ...string) *Masker {
	seen := map[string]bool{}
	var olds []string
	add := func(s string) {
		if len(s) >= MinMaskLen && !seen[s] {
			seen[s] = true
			olds = append(olds, s)
		}
	}
	for _, v := range values {
		if len(v) < MinMaskLen {
			continue
		}
		add(v)
		add(base64.StdEncoding.EncodeToString([]byte(v)))
		add(base64.RawStdEncoding.EncodeToString([]byte(v)))
	}
	if len(olds) == 0 {
		return &Masker{}
	}
	// Longest first: strings.Replacer tries arguments in order at each
	// position, so a secret that is a prefix of another must not win and
	// leave the rest of the longer one in clear.
	slices.SortStableFunc(olds, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	pairs := make([]string, 0, 2*len(olds))
	for _, o := range olds {
		pairs = append(pairs, o, MaskText)
	}
	return &Masker{r: strings.NewReplacer(pairs...), olds: olds}
}

// Longest is the length of the longest text the Masker masks (0: none).
func (m *Masker) Longest() int {
	if m == nil || len(m.olds) == 0 {
		return 0
	}
	return len(m.olds[0])
}

// SafeCut returns the largest cut at or before at, on a UTF-8 boundary,
// that no masked text in s straddles: masking s[:cut] and s[cut:] apart
// then hides everything that masking s whole would. A reader that must
// split a long line masks the part before such a cut and keeps the rest,
// at least Longest()-1 bytes, to mask with what follows.
func (m *Masker) SafeCut(s string, at int) int {
	at = max(0, min(at, len(s)))
	for {
		moved := false
		for at > 0 && at < len(s) && !utf8.RuneStart(s[at]) {
			at--
		}
		if m != nil {
			for _, o := range m.olds {
				// An occurrence straddling at lies wholly in this window,
				// and any occurrence in it straddles at.
				lo, hi := max(0, at-len(o)+1), min(len(s), at+len(o)-1)
				if lo >= hi {
					continue
				}
				if i := strings.Index(s[lo:hi], o); i >= 0 {
					at, moved = lo+i, true
				}
			}
		}
		if !moved {
			return at
		}
	}
}

// Mask returns line with every secret occurrence replaced by "***".
//
// One pass suffices unless a secret contains '*' and re-forms around a mask;
// repeating until nothing changes closes that gap and terminates, because each
// replacement shortens the line (a secret is longer than the mask).
func (m *Masker) Mask(line string) string {
	if m == nil || m.r == nil {
		return line
	}
	for {
		out := m.r.Replace(line)
		if out == line {
			return out
		}
		line = out
	}
}
