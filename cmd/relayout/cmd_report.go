package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/report"
)

func reportCommand() *cli.Command {
	flags := append([]cli.Flag{
		configFlag(),
		strFlag("html", "", "write the report as one self-contained HTML page (chart of per-slice read bytes before and after, sizes, packing, transfer, memory and time, warnings)"),
	}, logFlags()...)
	return &cli.Command{
		Name:         "report",
		Usage:        "render a run's or a dry run's report (_report.json, --report-json) as a page",
		UsageText:    "relayout report out/_report.json --html report.html",
		Description:  "The page has no scripts and fetches nothing: mail it, attach it to a ticket, open it offline.\n\n" + exitCodesHelp,
		Flags:        flags,
		Before:       withConfig(flags),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 || c.String("html") == "" {
				return errs.Usagef("report takes one report JSON and --html OUT.html")
			}
			data, err := os.ReadFile(c.Args().First())
			if err != nil {
				return errs.BadInputf("read %s: %v", c.Args().First(), err)
			}
			var r report.Report
			dec := json.NewDecoder(bytes.NewReader(data))
			if err := dec.Decode(&r); err != nil {
				return errs.BadInputf("%s is not a relayout report: %v", c.Args().First(), err)
			}
			if r.Format != report.Format {
				return errs.BadInputf("%s is not a relayout report (format %q, want %q)", c.Args().First(), r.Format, report.Format)
			}
			if r.FormatVersion > report.FormatVersion { // its fields may mean what this page does not know
				return errs.WithHint(errs.BadInputf("%s is report format version %d; this relayout renders version %d and older", c.Args().First(), r.FormatVersion, report.FormatVersion),
					"render it with the relayout that wrote it, or a newer one")
			}
			var buf bytes.Buffer
			if err := r.HTML(&buf); err != nil {
				return err
			}
			if err := os.WriteFile(c.String("html"), buf.Bytes(), 0o644); err != nil {
				return errs.TransientErr(fmt.Errorf("write %s: %w", c.String("html"), err))
			}
			fmt.Fprintf(c.App.Writer, "relayout: wrote %s (%d slices charted of %d)\n", c.String("html"), min(len(r.Slices.List), 20), r.Slices.Count)
			return nil
		},
	}
}
