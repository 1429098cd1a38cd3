package catalog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The widest number every store keeps: PostgreSQL's numeric, behind jsonb,
// holds up to 131072 digits before the decimal point and 16383 after it
// (counting the trailing zeros written). SQLite keeps params as text, but a
// number PostgreSQL cannot hold is refused on both, so that the same
// request means the same on either.
const (
	maxIntDigits  = 131072
	maxFracDigits = 16383
)

// checkNumbers refuses, naming the field, the first number in v (decoded
// with json.Number) that a store could not keep.
func checkNumbers(v any, path []string) error {
	switch v := v.(type) {
	case json.Number:
		if !storable(string(v)) {
			return &ParamsError{Field: strings.Join(path, "/"), Message: fmt.Sprintf("number %.40s… is out of range (at most %d digits before the decimal point and %d after it)", v, maxIntDigits, maxFracDigits)}
		}
	case map[string]any:
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range v {
				if !yield(k) {
					return
				}
			}
		}) {
			if err := checkNumbers(v[k], append(path, k)); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := checkNumbers(e, append(path, strconv.Itoa(i))); err != nil {
				return err
			}
		}
	}
	return nil
}

// storable reports whether the JSON number n fits maxIntDigits and
// maxFracDigits.
func storable(n string) bool {
	n = strings.TrimPrefix(n, "-")
	mant, exps, _ := strings.Cut(strings.ToLower(n), "e")
	exp := 0
	if exps != "" {
		e, err := strconv.Atoi(exps)
		if err != nil || e > 1<<30 || e < -(1<<30) {
			return false
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if len(frac)-exp > maxFracDigits {
		return false
	}
	digits := intPart + frac
	lead := len(digits) - len(strings.TrimLeft(digits, "0"))
	if lead == len(digits) {
		return true // zero
	}
	return len(intPart)+exp-lead <= maxIntDigits
}
