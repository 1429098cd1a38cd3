package api

import (
	"net/http"
	"strings"
)

// prefersMinimal reports whether the request asks, with RFC 7240's
// "Prefer: return=minimal", for an answer without the full representation
// of what it created. The first return preference wins; preferences this
// server does not know are ignored, as the RFC asks.
func prefersMinimal(r *http.Request) bool {
	for _, h := range r.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(h, ",") {
			pref, _, _ = strings.Cut(pref, ";")
			name, value, _ := strings.Cut(pref, "=")
			if !strings.EqualFold(strings.TrimSpace(name), "return") {
				continue
			}
			value = strings.Trim(strings.TrimSpace(value), `"`)
			return strings.EqualFold(value, "minimal")
		}
	}
	return false
}

// applyMinimal tells the caller its preference was honoured.
func applyMinimal(w http.ResponseWriter) {
	w.Header().Set("Preference-Applied", "return=minimal")
}
