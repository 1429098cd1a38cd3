package creds

import (
	"cmp"
	"encoding/base64"
	"slices"
	"strings"
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
	r *strings.Replacer
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
	return &Masker{r: strings.NewReplacer(pairs...)}
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
