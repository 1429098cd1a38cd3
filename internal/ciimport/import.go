package ciimport

import "slices"

// Result is one import: the inventory (classified), the definitions
// repository planned for it and the migration report.
type Result struct {
	Inventory *Inventory
	Plan      *Plan
}

// Import inventories the sources, classifies the jobs with the overrides
// (nil for none) and plans the definitions repository. It never stops at a
// problem of the input: every problem, the override file's included, is in
// Inventory.Errors, and what could be read is inventoried.
func Import(kind string, srcs []Source, ov *Overrides) *Result {
	var inv *Inventory
	switch kind {
	case KindGitLab:
		inv = GitLab(srcs)
	default:
		inv = GitHub(srcs)
	}
	if ov != nil {
		inv.Errors = append(inv.Errors, ov.Check(inv)...)
		sortErrors(inv.Errors)
		inv.Errors = slices.Compact(inv.Errors)
	}
	Classify(inv, ov)
	return &Result{Inventory: inv, Plan: Write(inv, ov)}
}

// Report is the migration report of the result.
func (r *Result) Report() string {
	return string(r.Plan.Files[ReportFile])
}

// ReportFile is where the written repository keeps the migration report.
const ReportFile = "MIGRATION.md"
