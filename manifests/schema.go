package manifests

import _ "embed"

// SchemaJSON is the JSON Schema of manifest.json.
//
//go:embed manifest.schema.json
var SchemaJSON []byte
