package audit

import "bytes"

// SetNoHorizon makes s seal up to the highest visible event without waiting
// for the horizon: the broken variant that AU3 must catch.
func SetNoHorizon(s *Sealer) { s.noHorizon = true }

// DetailsPaths returns details encoded by writeDetails and by the decoding
// path alone, which were the encoding before the in-place rewrite.
func DetailsPaths(raw []byte) (fast, decoded string) {
	var a, b bytes.Buffer
	writeDetails(&a, raw)
	if len(bytes.TrimSpace(raw)) == 0 {
		b.WriteString("null")
	} else {
		decodedDetails(&b, raw)
	}
	return a.String(), b.String()
}
