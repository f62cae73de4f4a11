package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/pipeline"
	"github.com/relayout/relayout/verify"
)

func verifyCommand() *cli.Command {
	flags := append([]cli.Flag{
		configFlag(),
		boolFlag("deep", "also decode every value and compare the content fingerprint"),
		boolFlag("json", "print the result as JSON"),
		boolFlag("strict", "fail (exit 3) on warnings too: files under parquet/ or tensors/ that the manifest does not name"),
		intFlag("parallel", verify.DefaultParallel, "files checked at once"),
		intFlag("generation", 0, "on a dataset root: the generation to check (default: the current one)"),
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
			o := verifyOptions{deep: c.Bool("deep"), json: c.Bool("json"), strict: c.Bool("strict"), parallel: c.Int("parallel"), generation: c.Int("generation")}
			return runVerify(c.Context, c.Args().First(), o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

type verifyOptions struct {
	deep, json, strict   bool
	parallel, generation int
}

// runVerify is `relayout verify`: the result on stdout (a line, or JSON),
// warnings on stderr, and exit 3 naming the first problem.
func runVerify(ctx context.Context, output string, o verifyOptions, stdout, stderr io.Writer) error {
	var res *verify.Result
	var err error
	if isDatasetRoot(ctx, output) {
		res, err = pipeline.VerifyDataset(ctx, output, o.generation, o.deep, o.parallel)
	} else {
		res, err = verify.Output(ctx, output, o.deep, o.parallel)
	}
	if err != nil {
		return err
	}
	if o.json {
		data, _ := json.MarshalIndent(res, "", " ")
		fmt.Fprintln(stdout, string(data))
	} else if res.OK {
		mode := "shallow"
		if res.Deep {
			mode = "deep"
		}
		if res.Rederived {
			mode += "; shards re-derived from the Parquet rows"
		}
		fmt.Fprintf(stdout, "ok: %d files, %d shards, %d rows, %s verified (%s)\n", res.Files, res.Shards, res.Rows, human(res.Bytes), mode)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "relayout: warning: %s\n", w)
	}
	if !res.OK {
		return errs.BadInputf("verify failed: %s", res.Problem)
	}
	if o.strict && len(res.Warnings) > 0 {
		return errs.BadInputf("verify failed (--strict): %s", res.Warnings[0])
	}
	return nil
}
