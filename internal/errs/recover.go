package errs

import (
	"fmt"
	"os"
	"runtime/debug"
)

// Recover turns a panic into a bad-input error stored in *errp. Use it as
// `defer errs.Recover(&err, "decode part-1.parquet")` around calls into the
// Parquet libraries, which panic on some malformed files instead of returning
// errors (parquet-go #537, arrow-go #382, apache/arrow #43605). The stack is
// kept out of the message; set RELAYOUT_DEBUG=1 to print it.
func Recover(errp *error, what string) {
	r := recover()
	if r == nil {
		return
	}
	if debugPanics {
		fmt.Fprintf(os.Stderr, "panic in %s: %v\n%s", what, r, debug.Stack())
	}
	*errp = WithHint(BadInputf("%s: corrupt data (the decoder failed: %v)", what, r), "re-export the file or leave it out of --input")
}
