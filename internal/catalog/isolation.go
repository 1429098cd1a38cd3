package catalog

import (
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// Values of run.network and of isolation.
const (
	NetworkDefault    = "default"
	NetworkNone       = "none"
	IsolationNone     = "none"
	IsolationRequired = "required"

	// MaxCPUMillis and MaxMemoryBytes bound run.resources far above any
	// real machine, so that products of them never overflow.
	MaxCPUMillis   = 1024 * 1000
	MaxMemoryBytes = 1 << 50
	// MaxImageRefLen bounds an image reference as registries do.
	MaxImageRefLen = 512
)

// Resources is what one attempt of a job may use.
type Resources struct {
	// CPUMillis is in thousandths of a CPU; 0: not limited.
	CPUMillis int64 `json:"cpu_millis,omitempty"`
	// MemoryBytes is 0 when not limited.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// ParseImageRef checks an OCI image reference:
// [host[:port]/]path[/path...][:tag][@sha256:<64 hex>]. A first component
// is a registry host when it has a dot or a port, or is localhost, as the
// container tools read it.
func ParseImageRef(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > MaxImageRefLen {
		return fmt.Errorf("is longer than %d characters", MaxImageRefLen)
	}
	name := s
	if i := strings.IndexByte(s, '@'); i >= 0 {
		name = s[:i]
		dg, ok := strings.CutPrefix(s[i+1:], "sha256:")
		if !ok || len(dg) != 64 || strings.Trim(dg, "0123456789abcdef") != "" {
			return fmt.Errorf("digest must be sha256: and 64 lowercase hex digits")
		}
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		tag := name[i+1:]
		name = name[:i]
		if !validTag(tag) {
			return fmt.Errorf("tag %q must be 1 to 128 of [A-Za-z0-9_.-], not starting with . or -", tag)
		}
	}
	parts := strings.Split(name, "/")
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		if err := validHost(parts[0]); err != nil {
			return err
		}
		parts = parts[1:]
	}
	for _, p := range parts {
		if !validPathComponent(p) {
			return fmt.Errorf("path component %q must be lowercase letters and digits, separated by one . or _, two _, or dashes", p)
		}
	}
	return nil
}

func validTag(t string) bool {
	if t == "" || len(t) > 128 || t[0] == '.' || t[0] == '-' {
		return false
	}
	for _, c := range []byte(t) {
		if !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
func isAlnum(c byte) bool      { return isLowerAlnum(c) || c >= 'A' && c <= 'Z' }

// validPathComponent is [a-z0-9]+ ((. | _ | __ | -+) [a-z0-9]+)*.
func validPathComponent(p string) bool {
	if p == "" || !isLowerAlnum(p[0]) || !isLowerAlnum(p[len(p)-1]) {
		return false
	}
	for i := 0; i < len(p); {
		if isLowerAlnum(p[i]) {
			i++
			continue
		}
		j := i
		for j < len(p) && !isLowerAlnum(p[j]) {
			j++
		}
		sep := p[i:j]
		if sep != "." && sep != "_" && sep != "__" && strings.Trim(sep, "-") != "" {
			return false
		}
		i = j
	}
	return true
}

func validHost(h string) error {
	host, port, hasPort := strings.Cut(h, ":")
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' || port[0] == '+' {
			return fmt.Errorf("registry port %q must be 1 to 65535", port)
		}
	}
	for _, l := range strings.Split(host, ".") {
		ok := l != "" && len(l) <= 63 && isAlnum(l[0]) && isAlnum(l[len(l)-1])
		for _, c := range []byte(l) {
			ok = ok && (isAlnum(c) || c == '-')
		}
		if !ok {
			return fmt.Errorf("registry host %q is not a host name", host)
		}
	}
	return nil
}

// ParseCPU reads a CPU quantity into millicores: "500m", "2", "0.5" (at
// most three decimals), greater than zero.
func ParseCPU(s string) (int64, error) {
	bad := fmt.Errorf("invalid CPU quantity %q (use 500m, 2 or 0.5)", s)
	var m int64
	if n, ok := strings.CutSuffix(s, "m"); ok {
		if n == "" || strings.Trim(n, "0123456789") != "" || len(n) > 10 {
			return 0, bad
		}
		m, _ = strconv.ParseInt(n, 10, 64)
	} else {
		whole, frac, _ := strings.Cut(s, ".")
		if whole == "" || len(whole) > 10 || len(frac) > 3 || strings.Trim(whole+frac, "0123456789") != "" {
			return 0, bad
		}
		w, _ := strconv.ParseInt(whole, 10, 64)
		f, _ := strconv.ParseInt((frac + "000")[:3], 10, 64)
		m = w*1000 + f
	}
	if m <= 0 || m > MaxCPUMillis {
		return 0, fmt.Errorf("CPU %q must be more than 0 and at most %d", s, MaxCPUMillis/1000)
	}
	return m, nil
}

// memoryUnits are the suffixes ParseMemory reads.
var memoryUnits = []struct {
	suffix string
	factor int64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

// ParseMemory reads a memory quantity into bytes: a whole number with an
// optional unit (Ki, Mi, Gi, Ti, K, M, G, T), greater than zero.
func ParseMemory(s string) (int64, error) {
	n, factor := s, int64(1)
	for _, u := range memoryUnits {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, factor = v, u.factor
			break
		}
	}
	if n == "" || len(n) > 16 || strings.Trim(n, "0123456789") != "" {
		return 0, fmt.Errorf("invalid memory quantity %q (use a whole number with Ki, Mi, Gi, Ti, K, M, G or T, like 256Mi)", s)
	}
	v, _ := strconv.ParseInt(n, 10, 64)
	if v <= 0 || v > MaxMemoryBytes/factor {
		return 0, fmt.Errorf("memory %q must be more than 0 and at most 1Pi", s)
	}
	return v * factor, nil
}

// FormatCPU spells millicores as ParseCPU reads them.
func FormatCPU(m int64) string {
	if m%1000 == 0 {
		return strconv.FormatInt(m/1000, 10)
	}
	return strconv.FormatInt(m, 10) + "m"
}

// FormatMemory spells bytes with the largest binary unit that divides them.
func FormatMemory(b int64) string {
	for _, u := range []struct {
		s string
		f int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if b >= u.f && b%u.f == 0 {
			return strconv.FormatInt(b/u.f, 10) + u.s
		}
	}
	return strconv.FormatInt(b, 10)
}

func (j *Job) parseResources(d *yamlpos.Decoder, n ast.Node, field string) {
	r := &Resources{}
	if _, ok := d.Object(n, field, 2, map[string]func(ast.Node, string){
		"cpu": func(v ast.Node, f string) {
			s, ok := quantity(d, v, f)
			if !ok {
				return
			}
			m, err := ParseCPU(s)
			if err != nil {
				d.Add(v, f, "%v", err)
				return
			}
			r.CPUMillis = m
		},
		"memory": func(v ast.Node, f string) {
			s, ok := quantity(d, v, f)
			if !ok {
				return
			}
			b, err := ParseMemory(s)
			if err != nil {
				d.Add(v, f, "%v", err)
				return
			}
			r.MemoryBytes = b
		},
	}); ok && (r.CPUMillis > 0 || r.MemoryBytes > 0) {
		j.Run.Resources = r
	}
}

// quantity reads a string or a plain number (cpu: 2, cpu: 0.5) as text.
func quantity(d *yamlpos.Decoder, n ast.Node, field string) (string, bool) {
	switch v := d.Resolve(n, field).(type) {
	case *ast.IntegerNode:
		return v.GetToken().Value, true
	case *ast.FloatNode:
		if math.IsInf(v.Value, 0) || math.IsNaN(v.Value) {
			d.Add(n, field, "must be a finite quantity")
			return "", false
		}
		return v.GetToken().Value, true
	case *ast.StringNode, *ast.LiteralNode, nil:
		return d.Str(n, field)
	default:
		d.Add(n, field, "must be a quantity like 500m, 2, 0.5 or 256Mi, got %s", yamlpos.KindOf(v))
		return "", false
	}
}

// checkWorkdir checks run.workdir once run.image is known: a relative path
// must stay inside the workspace; an absolute one names a directory of the
// image, so it needs one.
func (j *Job) checkWorkdir(d *yamlpos.Decoder, n ast.Node, field string) {
	w := j.Run.Workdir
	switch {
	case w == "" || strings.ContainsRune(w, 0):
		d.Add(n, field, "must be a non-empty path")
	case path.IsAbs(w):
		if j.Run.Image == "" {
			d.Add(n, field, "an absolute path is a directory of the image and needs run.image; without one use a path relative to the workspace")
		}
	default:
		if c := path.Clean(w); c == ".." || strings.HasPrefix(c, "../") {
			d.Add(n, field, "must stay inside the workspace, got %q", w)
		}
	}
}
