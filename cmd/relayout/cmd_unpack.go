package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/pipeline"
)

func unpackCommand() *cli.Command {
	flags := append([]cli.Flag{
		configFlag(),
		strFlag("input", "", "a packed relayout output (written with --query-key)"),
		strFlag("output", "", "output folder or URL prefix"),
		boolFlag("overwrite", "replace an existing output"),
		intFlag("parallel", 0, "goroutines (default: number of CPUs)"),
	}, logFlags()...)
	return &cli.Command{
		Name:      "unpack",
		Usage:     "restore one row per item from a packed output (the exact inverse of --query-key)",
		UsageText: "relayout unpack --input ./packed/ --output ./flat/",
		Description: "Writes the original columns (names, types, order), one row per item, with a manifest\n" +
			"whose fingerprint must equal the packed manifest's.\n\n" + exitCodesHelp,
		Flags:        flags,
		Before:       withConfig(flags),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.String("input") == "" || c.String("output") == "" {
				return errs.Usagef("unpack needs --input and --output")
			}
			res, err := pipeline.Unpack(c.Context, pipeline.UnpackOptions{
				Input: c.String("input"), Output: c.String("output"), Overwrite: c.Bool("overwrite"), Parallel: c.Int("parallel"),
			})
			if err != nil {
				return err
			}
			m := res.Manifest
			fmt.Fprintf(c.App.Writer, "relayout: unpacked %d rows into %d files (%s); fingerprint %s matches the packed manifest\n",
				m.Totals.Rows, m.Totals.Files, human(m.Totals.Bytes), m.Fingerprint.Hash)
			return nil
		},
	}
}
