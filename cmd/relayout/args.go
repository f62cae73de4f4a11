package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// boolFlags returns the names (and aliases) of the app's flags that take no
// value, read from the flag definitions so a new bool flag cannot be missed.
func boolFlags(app *cli.App) map[string]bool {
	out := map[string]bool{"help": true, "h": true, "version": true, "v": true}
	add := func(fs []cli.Flag) {
		for _, f := range fs {
			if tv, ok := f.(interface{ TakesValue() bool }); ok && !tv.TakesValue() {
				for _, n := range f.Names() {
					out[n] = true
				}
			}
		}
	}
	add(app.Flags)
	for _, c := range app.Commands {
		add(c.Flags)
	}
	return out
}

// permuteArgs moves a subcommand's flags before its positional arguments,
// so that `relayout verify ./out --deep` works: urfave/cli v2 stops parsing
// flags at the first positional argument. "--" ends flag handling.
func permuteArgs(args []string, boolFlags map[string]bool) []string {
	if len(args) < 2 {
		return args
	}
	sub := -1
	for i := 1; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			sub = i
			break
		}
	}
	if sub < 0 {
		return args
	}
	out := append([]string{}, args[:sub+1]...)
	var pos []string
	rest := args[sub+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		out = append(out, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && !boolFlags[name] && i+1 < len(rest) {
			out = append(out, rest[i+1])
			i++
		}
	}
	return append(out, pos...)
}
