package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// humanDuration spells d the way people write it in definitions: 30m,
// 1h30m, 10s (time.Duration.String would say 30m0s).
func humanDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// definitionDurations are the fields of a job definition that the API
// sends as nanoseconds (catalog.Job's time.Duration fields).
var definitionDurations = [][2]string{{"run", "timeout"}, {"run", "lease_ttl"}, {"retries", "backoff"}}

// humanDefinition indents a job definition for people, its durations
// spelled as in YAML (30m) rather than as nanoseconds.
func humanDefinition(def json.RawMessage, prefix string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(def))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || m == nil {
		return "", false
	}
	for _, f := range definitionDurations {
		sub, ok := m[f[0]].(map[string]any)
		if !ok {
			continue
		}
		n, ok := sub[f[1]].(json.Number)
		if !ok {
			continue
		}
		if ns, err := n.Int64(); err == nil {
			sub[f[1]] = humanDuration(time.Duration(ns))
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent(prefix, "  ")
	if enc.Encode(m) != nil {
		return "", false
	}
	return strings.TrimSuffix(buf.String(), "\n"), true
}

// unescapeHTML undoes encoding/json's HTML escaping (\u003c, \u003e,
// \u0026) in raw JSON, leaving every other byte as it is: audit details
// are read by people and exported for tools, and neither wants <b> as
// \u003cb\u003e. A literal backslash (\\) is skipped as a pair, so "\\u003c"
// stays as written.
func unescapeHTML(raw []byte) []byte {
	if !bytes.Contains(raw, []byte(`\u00`)) {
		return raw
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' || i+1 >= len(raw) {
			out = append(out, c)
			continue
		}
		if raw[i+1] == 'u' && i+6 <= len(raw) {
			switch string(raw[i+2 : i+6]) {
			case "003c", "003C":
				out = append(out, '<')
				i += 5
				continue
			case "003e", "003E":
				out = append(out, '>')
				i += 5
				continue
			case "0026":
				out = append(out, '&')
				i += 5
				continue
			}
		}
		out = append(out, c, raw[i+1])
		i++
	}
	return out
}
