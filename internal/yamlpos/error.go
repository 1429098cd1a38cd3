package yamlpos

import "fmt"

// Error is one problem of a file. Line and Column are 1-based; a problem that
// concerns the file as a whole has no position and is reported at 0:0, or at
// 1:1 with Options.PositionFileErrors.
type Error struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Error formats the problem the way compilers do, so editors can jump to it.
func (e Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, e.Field, e.Message)
}
