package main

import (
	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
)

func runInspect(c *cli.Context) error { return errs.Usagef("inspect: not yet") }
