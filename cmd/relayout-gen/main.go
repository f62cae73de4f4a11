// Command relayout-gen writes a synthetic flattened recommendation impression
// log (see internal/gen) for the demo, tests and benchmarks.
//
//	relayout-gen --out ./events --rows 1000000 --files 4
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/relayout/relayout/internal/gen"
)

func main() {
	out := flag.String("out", "events", "output folder")
	rows := flag.Int64("rows", 100_000, "rows")
	files := flag.Int("files", 4, "files")
	seed := flag.Uint64("seed", 1, "random seed")
	countries := flag.Int("countries", 40, "distinct countries")
	days := flag.Int("days", 30, "distinct dates")
	flag.Parse()
	paths, err := gen.Write(*out, gen.Options{Rows: *rows, Files: *files, Seed: *seed, Countries: *countries, Days: *days})
	if err != nil {
		fmt.Fprintln(os.Stderr, "relayout-gen:", err)
		os.Exit(1)
	}
	var total int64
	for _, p := range paths {
		st, _ := os.Stat(p)
		total += st.Size()
	}
	fmt.Printf("relayout-gen: wrote %d rows in %d files (%.1f MB) to %s\n", *rows, len(paths), float64(total)/1e6, *out)
}
