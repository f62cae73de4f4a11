package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
)

// FuzzConfig: any bytes as a --config file are applied or refused with exit
// 2 (never a panic, never another class). The command's action is a no-op:
// only the config's parsing and application are exercised.
func FuzzConfig(f *testing.F) {
	f.Add([]byte("slice-keys: [country, date]\nrow-group-bytes: 4MiB\noverwrite: true\n"))
	f.Add([]byte("slice-keys: country,date\nparallel: 2\n"))
	f.Add([]byte("slice_keys: [country]\n"))
	f.Add([]byte("input:\n  - a\n  - b\ntensors: yes\nzstd-level: 9\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		flags := runFlags()
		app := &cli.App{Name: "relayout", ExitErrHandler: func(*cli.Context, error) {}, OnUsageError: usageError, Writer: devNull{}, ErrWriter: devNull{},
			Commands: []*cli.Command{{Name: "run", Flags: flags, Before: withConfig(flags), OnUsageError: usageError,
				Action: func(c *cli.Context) error { _, err := runOptions(c); return err }}}}
		err := app.Run([]string{"relayout", "run", "--config", p, "--quiet"})
		if err != nil && (errs.ClassOf(err) != errs.Usage || strings.Contains(err.Error(), "panic")) {
			t.Fatalf("%v (class %v), want exit 2", err, errs.ClassOf(err))
		}
	})
}

type devNull struct{}

func (devNull) Write(b []byte) (int, error) { return len(b), nil }
