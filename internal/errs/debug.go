package errs

import "os"

var debugPanics = os.Getenv("RELAYOUT_DEBUG") != ""
