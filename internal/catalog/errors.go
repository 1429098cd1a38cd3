package catalog

import "fmt"

// Error is one validation problem in a definitions file. Line and Column are
// 1-based; they are 0 when the problem concerns the file as a whole.
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

// ParamsError reports why a run's parameters do not satisfy the job's schema.
// Field names the first failing value as a slash-separated path inside the
// params object ("account", "items/0"); it is empty for the params object
// itself.
type ParamsError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *ParamsError) Error() string {
	if e.Field == "" {
		return "params: " + e.Message
	}
	return "params." + e.Field + ": " + e.Message
}
