// Package manifests defines relayout's output manifest: the single commit
// point of a run and the index readers use to find slices.
//
// A run writes its data files first and <output>/manifest.json last; a folder
// without a manifest holds no complete output. The manifest is a pure function
// of the input and the layout-affecting configuration: no timings, host names
// or run IDs (those go to _report.json), so repeated runs give byte-identical
// manifests.
//
// Schema: manifest.schema.json (JSON Schema 2020-12) beside this file, embedded
// as SchemaJSON. Versioning rule: format_version changes only when a reader of
// the previous version would misread the manifest (a field removed, renamed or
// given a new meaning); adding optional fields keeps the version. Readers must
// reject a format_version they do not know.
package manifests
