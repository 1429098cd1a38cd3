package catalog

import "testing"

// TestStorable: the limits of PostgreSQL's numeric, as measured against a
// server (select '{"a":N}'::jsonb).
func TestStorable(t *testing.T) {
	for n, want := range map[string]bool{
		"0": true, "-0.5": true, "1e400": true, "1e131071": true, "1e131072": false, "100000e131068": false,
		"1e-16383": true, "1e-16384": false, "0.1e-16382": true, "1.0e-16383": false, "0e2000": true,
		"1e99999999999999999999": false, "-1e-1000000": false, "123456789012345678901234567890": true,
	} {
		if got := storable(n); got != want {
			t.Errorf("storable(%s) = %v, want %v", n, got, want)
		}
	}
}
