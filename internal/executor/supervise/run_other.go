//go:build !linux

package supervise

import (
	"fmt"
	"io"
)

// Main reports that supervision needs Linux (a child subreaper and /proc).
func Main(_ []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "jobplane supervise: needs Linux")
	return codeUsage
}
