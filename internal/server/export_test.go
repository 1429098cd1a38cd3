package server

import "time"

// SetBodyReadTimeout shortens the body read timeout for a test.
func SetBodyReadTimeout(d time.Duration) (restore func()) {
	old := bodyReadTimeout
	bodyReadTimeout = d
	return func() { bodyReadTimeout = old }
}
