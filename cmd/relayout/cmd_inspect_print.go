package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/pipeline"
)

func runInspect(c *cli.Context) error {
	if c.NArg() == 1 && isDatasetRoot(c.Context, c.Args().First()) {
		return printGenerations(c.Context, c.Args().First(), c.Bool("json"), c.App.Writer)
	}
	res, err := pipeline.Inspect(c.Context, pipeline.InspectOptions{
		Inputs: c.Args().Slice(), HivePartitioning: c.String("hive-partitioning"), HiveTypes: c.String("hive-types"), SliceKeys: pipeline.SplitList(c.StringSlice("slice-keys")), Parallel: c.Int("parallel"),
	})
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool("json") {
		data, _ := json.MarshalIndent(res, "", " ")
		fmt.Fprintln(w, string(data))
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "FILE\tROWS\tROW GROUPS\tBYTES\tCODECS\tPAGE INDEX\t")
	for _, f := range res.Files {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%v\t\n", f.Path, f.Rows, f.RowGroups, human(f.Bytes), strings.Join(f.Codecs, ","), f.PageIndex)
	}
	fmt.Fprintf(tw, "total (%d files)\t%d\t%d\t%s\t\t\t\n", res.Totals.Files, res.Totals.Rows, res.Totals.RowGroups, human(res.Totals.Bytes))
	tw.Flush()
	if len(res.SliceKeys) == 0 {
		return nil
	}
	top := append([]pipeline.InspectSlice{}, res.Slices...)
	sort.SliceStable(top, func(i, j int) bool { return top[i].Rows > top[j].Rows })
	n := c.Int("slices")
	if n > 0 && len(top) > n {
		top = top[:n]
	}
	fmt.Fprintf(w, "\n%d slices by %s; the %d largest (a statistics-pruning reader reads READ BYTES for `SELECT * WHERE <slice>`):\n", len(res.Slices), strings.Join(res.SliceKeys, ","), len(top))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SLICE\tROWS\tRG TOUCHED\tRG READ\tREAD BYTES\tSHARE\tAMPLIFICATION\t")
	for _, s := range top {
		var parts []string
		for _, kv := range s.Key {
			parts = append(parts, shown(kv.Value))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%.1fx\t\n", strings.Join(parts, "/"), s.Rows, s.RowGroupsTouched, s.RowGroupsRead, human(s.ReadBytes), human(s.ShareBytes), s.Amplification)
	}
	tw.Flush()
	if res.SliceSummary != nil {
		fmt.Fprintf(w, "read amplification weighted by rows: %.2fx; row groups read per slice (weighted): %.1f of %d\n", res.SliceSummary.Amplification, res.SliceSummary.MeanRowGroupsRead, res.Totals.RowGroups)
	}
	fmt.Fprintf(w, "inspect read %s in %d requests\n", human(res.Cost.BytesRead), res.Cost.Requests)
	return nil
}

// shown is a slice key value as a terminal line shows it: as it prints,
// or quoted with escapes where it holds a control character or another
// rune that does not print (a value with an escape sequence would
// otherwise act on the operator's terminal, a newline break the table).
func shown(v any) string {
	s := fmt.Sprint(v)
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
