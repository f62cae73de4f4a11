package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/verify"
)

func verifyCommand() *cli.Command {
	flags := append([]cli.Flag{
		configFlag(),
		boolFlag("deep", "also decode every value and compare the content fingerprint"),
		boolFlag("json", "print the result as JSON"),
		boolFlag("strict", "fail (exit 3) on warnings too: files under parquet/ or tensors/ that the manifest does not name"),
		intFlag("parallel", 0, "files checked at once (default: 2)"),
	}, logFlags()...)
	return &cli.Command{
		Name:      "verify",
		Usage:     "check an output against its manifest",
		UsageText: "relayout verify ./relaid/ [--deep]",
		Description: "Checks every file's presence, size and xxhash64, footer row counts, key order,\n" +
			"slice boundaries and key statistics; --deep also checks the content fingerprint.\n" +
			"Exit 0 when all hold; 3 naming the first mismatch otherwise.\n\n" + exitCodesHelp,
		Flags:        flags,
		Before:       withConfig(flags),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errs.Usagef("verify takes one output folder or URL")
			}
			res, err := verify.Output(c.Context, c.Args().First(), c.Bool("deep"), c.Int("parallel"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				data, _ := json.MarshalIndent(res, "", " ")
				fmt.Fprintln(c.App.Writer, string(data))
			} else if res.OK {
				mode := "shallow"
				if res.Deep {
					mode = "deep"
				}
				if res.Rederived {
					mode += "; shards re-derived from the Parquet rows"
				}
				fmt.Fprintf(c.App.Writer, "ok: %d files, %d shards, %d rows, %s verified (%s)\n", res.Files, res.Shards, res.Rows, human(res.Bytes), mode)
			}
			for _, w := range res.Warnings {
				fmt.Fprintf(c.App.ErrWriter, "relayout: warning: %s\n", w)
			}
			if !res.OK {
				return errs.BadInputf("verify failed: %s", res.Problem)
			}
			if c.Bool("strict") && len(res.Warnings) > 0 {
				return errs.BadInputf("verify failed (--strict): %s", res.Warnings[0])
			}
			return nil
		},
	}
}
