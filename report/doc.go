// Package report holds the run report (_report.json, docs/report.md) and
// the models behind its figures: what reading one slice costs on a table
// (page indexes, statistics, row-group byte ranges), before and after the
// re-layout, and the dry run's scaling model, which predicts the output's
// row groups and bytes from the exact layout and a sample's measured sizes.
//
// It depends on the data-path stages (partition for the histogram and
// layout, writer for shard sizes, manifests) and none depends on it except
// the commands (pipeline) and the plan, which records each slice's cost on
// the input.
package report
