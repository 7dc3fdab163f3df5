// Package report is goshbench's data model and output: the record of
// one figure and the -json schema (record.go), the run's description
// and what a job hands back (run.go), the statistics of repetitions
// (stats.go), and the three renderings: the table (table.go), Go
// benchmark lines for benchstat (benchfmt.go) and SVG plots written
// with the standard library (svg.go).
//
// Caveats:
//   - A Record's field set is a contract with CI and with users'
//     scripts: add to Run, not to Record.
//   - Outliers are reported, never removed: Value is the median of all
//     repetitions, and Min and Max include the outliers.
package report
