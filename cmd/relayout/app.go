package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/version"
)

const exitCodesHelp = `Exit codes: 0 ok; 1 internal error; 2 usage or configuration error;
3 bad input data (corrupt file, schema mismatch, missing column, unsupported
type, encrypted file; do not retry); 4 transient I/O error (retry);
5 precondition failed (output exists: pass --overwrite).`

func newApp() *cli.App {
	return &cli.App{
		Name:    "relayout",
		Usage:   "re-lay Parquet training data out for fast, slice-wise loading",
		Version: version.Version,
		Description: "Every flag can also be set with an environment variable RELAYOUT_<FLAG>\n" +
			"(e.g. RELAYOUT_SLICE_KEYS) or in a YAML file given with --config;\n" +
			"a flag beats the environment, which beats the file.\n\n" + exitCodesHelp,
		Commands: []*cli.Command{runCommand(), unpackCommand(), verifyCommand(), inspectCommand(),
			planCommand(), keysCommand(), mapCommand(), detectCommand(), reduceCommand(), commitCommand(), gcCommand(), filesCommand(), reportCommand()},
		OnUsageError:   usageError,
		ExitErrHandler: func(*cli.Context, error) {},
		Suggest:        true,
	}
}

func usageError(_ *cli.Context, err error, _ bool) error {
	return errs.Usagef("%v (see relayout --help)", err)
}

func envName(flag string) []string {
	return []string{"RELAYOUT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// withConfig wires altsrc so that flags may come from --config YAML. Keys
// are flag names; an unknown key is an error (a misspelt key such as
// slice_keys would otherwise be dropped silently), and a list flag takes a
// YAML list or the command line's comma form ("country,date").
func withConfig(flags []cli.Flag) cli.BeforeFunc {
	return func(c *cli.Context) error {
		file := c.String("config")
		if file == "" {
			return nil
		}
		src, err := configSource(file, flags)
		if err != nil {
			return err
		}
		if err := altsrc.ApplyInputSourceValues(c, src, flags); err != nil {
			return errs.Usagef("config file %s: %v", file, err)
		}
		return nil
	}
}

// configSource reads and checks a --config YAML file.
func configSource(file string, flags []cli.Flag) (altsrc.InputSourceContext, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, errs.Usagef("config file %s: %v", file, err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, errs.Usagef("config file %s: not YAML: %v", file, err)
	}
	known := map[string]cli.Flag{}
	for _, f := range flags {
		for _, n := range f.Names() {
			known[n] = f
		}
	}
	values := map[any]any{}
	var unknown []string
	for k, v := range raw {
		f, ok := known[k]
		if !ok || k == "config" {
			unknown = append(unknown, k)
			continue
		}
		if _, list := f.(*altsrc.StringSliceFlag); list {
			switch x := v.(type) {
			case string:
				var items []any
				for _, p := range strings.Split(x, ",") {
					if p = strings.TrimSpace(p); p != "" {
						items = append(items, p)
					}
				}
				v = items
			case []any:
			default:
				return nil, errs.Usagef("config file %s: %s: want a list or a comma-separated string, got %v", file, k, v)
			}
		}
		values[k] = v
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		hint := ""
		if n := strings.ReplaceAll(unknown[0], "_", "-"); known[n] != nil {
			hint = fmt.Sprintf(" (did you mean %s?)", n)
		}
		return nil, errs.Usagef("config file %s: unknown key %s%s; keys are the command's flag names", file, strings.Join(unknown, ", "), hint)
	}
	return altsrc.NewMapInputSource(file, values), nil
}

func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Usage: "YAML file with flag values (keys are flag names)", EnvVars: envName("config")}
}

func strFlag(name, value, usage string) cli.Flag {
	return altsrc.NewStringFlag(&cli.StringFlag{Name: name, Value: value, Usage: usage, EnvVars: envName(name)})
}

func sliceFlag(name, usage string) cli.Flag {
	return altsrc.NewStringSliceFlag(&cli.StringSliceFlag{Name: name, Usage: usage, EnvVars: envName(name)})
}

func intFlag(name string, value int, usage string) cli.Flag {
	return altsrc.NewIntFlag(&cli.IntFlag{Name: name, Value: value, Usage: usage, EnvVars: envName(name)})
}

func boolFlag(name, usage string) cli.Flag {
	return altsrc.NewBoolFlag(&cli.BoolFlag{Name: name, Usage: usage, EnvVars: envName(name)})
}

// parseSize parses "128MiB", "2GiB", "1.5GB", "4096" into bytes.
func parseSize(flag, s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	mult := 1.0
	num := s
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			num = strings.TrimSpace(s[:len(s)-len(u.suffix)])
			mult = u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, errs.Usagef("--%s: %q is not a size (use e.g. 128MiB, 2GiB or a number of bytes)", flag, s)
	}
	return int64(v * mult), nil
}
