package main

import (
	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
)

func inspectCommand() *cli.Command {
	flags := append([]cli.Flag{
		configFlag(),
		sliceFlag("slice-keys", "columns whose values define slices"),
		strFlag("hive-partitioning", "auto", "read partition columns from key=value folders: auto, on, off"),
		strFlag("hive-types", "", "partition column types, e.g. date=date,hour=int32"),
		boolFlag("json", "print JSON"),
		intFlag("slices", 20, "slices listed in the table (largest first; 0: all)"),
		intFlag("parallel", 0, "goroutines (default: number of CPUs)"),
	}, logFlags()...)
	return &cli.Command{
		Name:         "inspect",
		Usage:        "describe Parquet inputs and what reading one slice costs",
		UsageText:    "relayout inspect ./events/ --slice-keys country,date [--json]",
		Flags:        flags,
		Before:       withConfig(flags),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return errs.Usagef("inspect takes one or more inputs")
			}
			return runInspect(c)
		},
	}
}
