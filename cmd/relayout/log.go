package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/pipeline"
)

func logFlags() []cli.Flag {
	return []cli.Flag{
		strFlag("log-format", "text", "log format on stderr: text or json"),
		strFlag("log-level", "info", "debug, info, warn or error"),
		boolFlag("quiet", "no progress and only warnings"),
		&cli.DurationFlag{Name: "progress-interval", Value: 10 * time.Second, EnvVars: envName("progress-interval"),
			Usage: "off a terminal: how often a progress line is logged"},
	}
}

func newLogger(c *cli.Context, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, errs.Usagef("--log-level: %q is not debug, info, warn or error", c.String("log-level"))
	}
	if c.Bool("quiet") {
		lvl = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(c.String("log-format")) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, errs.Usagef("--log-format: %q is not text or json", c.String("log-format"))
}

// progress draws a bar on a terminal and logs a line every interval (10 s
// by default) otherwise.
type progress struct {
	mu       sync.Mutex
	interval time.Duration
	w        io.Writer
	tty      bool
	log      *slog.Logger
	stage    string
	total    int64
	done     int64
	started  time.Time
	last     time.Time
}

func newProgress(c *cli.Context, log *slog.Logger) pipeline.Progress {
	if c.Bool("quiet") {
		return nil
	}
	iv := c.Duration("progress-interval")
	if iv <= 0 {
		iv = 10 * time.Second
	}
	return &progress{w: os.Stderr, tty: isatty.IsTerminal(os.Stderr.Fd()), log: log, interval: iv}
}

func (p *progress) Start(stage string, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stage, p.total, p.done, p.started, p.last = stage, total, 0, time.Now(), time.Now()
}

func (p *progress) Add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	now := time.Now()
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond {
			return
		}
		p.last = now
		frac := 0.0
		if p.total > 0 {
			frac = float64(p.done) / float64(p.total)
		}
		bar := strings.Repeat("=", int(frac*30)) + strings.Repeat(" ", 30-int(frac*30))
		fmt.Fprintf(p.w, "\r%-6s [%s] %5.1f%%", p.stage, bar, 100*frac)
		return
	}
	if now.Sub(p.last) >= p.interval {
		p.last = now
		p.log.Info("progress", "stage", p.stage, "done", p.done, "total", p.total)
	}
}

func (p *progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r%-6s [%s] done in %.1fs\n", p.stage, strings.Repeat("=", 30), time.Since(p.started).Seconds())
	}
}
