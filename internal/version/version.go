// Package version holds relayout's version, stamped at build time with
// -ldflags "-X github.com/relayout/relayout/internal/version.Version=...".
package version

// Version is relayout's version.
var Version = "0.1.0-dev"
