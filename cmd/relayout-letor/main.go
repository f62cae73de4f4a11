// Command relayout-letor converts learning-to-rank text (SVMlight / LETOR /
// LibSVM with qid) to Parquet; see internal/letor.
//
//	relayout-letor --out mq2008.parquet ../shared/data/letor-mq2008-xgboost/test.txt
//	relayout-letor --group toy.train.group --out toy.parquet toy.train
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/relayout/relayout/internal/letor"
)

func main() {
	out := flag.String("out", "", "output Parquet file")
	group := flag.String("group", "", "group-size file for data without qid")
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: relayout-letor --out FILE.parquet [--group FILE.group] INPUT.txt")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *group, *out); err != nil {
		fmt.Fprintln(os.Stderr, "relayout-letor:", err)
		os.Exit(3)
	}
}

func run(in, group, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := letor.Parse(f, in)
	if err != nil {
		return err
	}
	if group != "" {
		g, err := os.Open(group)
		if err != nil {
			return err
		}
		defer g.Close()
		if err := letor.ApplyGroups(rows, g, group); err != nil {
			return err
		}
	}
	if err := letor.WriteParquet(out, rows); err != nil {
		return err
	}
	fmt.Printf("relayout-letor: %d rows from %s to %s\n", len(rows), in, out)
	return nil
}
