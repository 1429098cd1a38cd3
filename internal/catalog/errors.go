package catalog

import "github.com/jobplane/jobplane/internal/yamlpos"

// Error is one validation problem in a definitions file. Line and Column are
// 1-based; they are 0 when the problem concerns the file as a whole.
type Error = yamlpos.Error

// MaxFileSize is the largest definitions file accepted, in bytes.
const MaxFileSize = 1 << 20

// yamlOptions are the budgets of a definitions file (see package yamlpos).
var yamlOptions = yamlpos.Options{Limits: yamlpos.Limits{
	MaxFileSize:  MaxFileSize,
	MaxFlowDepth: 128,     // unclosed [ or { at any point
	MaxSeqRun:    32,      // "- - - x" entries on one line
	MaxDepth:     64,      // nesting of decoded values
	MaxNodes:     200_000, // nodes visited per file, aliases expanded
}}

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
