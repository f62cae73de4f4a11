package manifests

import _ "embed"

// SchemaJSON is the JSON Schema of manifest.json.
//
//go:embed manifest.schema.json
var SchemaJSON []byte

// ReportSchemaJSON is the JSON Schema of the run report (_report.json) and
// of a dry run's report.
//
//go:embed report.schema.json
var ReportSchemaJSON []byte
