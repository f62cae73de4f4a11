// Command relayout rewrites Parquet training data so that slices are
// contiguous row groups, with a manifest as the single commit point.
//
// Exit codes: 0 ok, 1 internal error, 2 usage or configuration, 3 bad input
// data, 4 transient I/O (retry), 5 precondition (output exists; --overwrite).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/relayout/relayout/internal/arrowmem"
	"github.com/relayout/relayout/internal/errs"
)

func main() {
	defer func() {
		if r := recover(); r != nil {
			if os.Getenv("RELAYOUT_DEBUG") != "" {
				fmt.Fprintf(os.Stderr, "%s\n", debug.Stack())
			}
			fmt.Fprintf(os.Stderr, "relayout: internal error: %v (a bug: please report it with the command line; RELAYOUT_DEBUG=1 prints the stack)\n", r)
			os.Exit(int(errs.Internal))
		}
	}()
	awsDefaults()
	dropInitPages()
	arrowmem.Install()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	stopProfile := startProfile()
	app := newApp()
	err := app.RunContext(ctx, permuteArgs(os.Args, boolFlags(app)))
	stopProfile()
	stop()
	os.Exit(exitCode(err))
}

// exitCode prints err as one line and returns its exit code.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	fmt.Fprintf(os.Stderr, "relayout: %s\n", msg)
	if errs.ClassOf(err) == errs.Internal && errors.Is(err, context.Canceled) {
		return int(errs.Transient)
	}
	return int(errs.ClassOf(err))
}

// awsDefaults sets the AWS SDK's environment defaults for a batch tool that
// talks to S3 and S3-protocol stores, where the user has not set them:
//   - no EC2 instance-metadata lookup (AWS_EC2_METADATA_DISABLED=true): off
//     EC2 it is a request to 169.254.169.254 that hangs until it times out,
//     and tests and CI must send nothing off loopback. Set
//     AWS_EC2_METADATA_DISABLED=false to take credentials from an instance
//     profile.
//   - checksums only where the operation requires them
//     (AWS_REQUEST_CHECKSUM_CALCULATION and AWS_RESPONSE_CHECKSUM_VALIDATION
//     = when_required): S3-protocol stores that do not return the newer
//     checksums otherwise make the SDK print a WARN line on every GET.
//     relayout checks every object it reads against the manifest's xxhash64.
func awsDefaults() {
	for k, v := range map[string]string{
		"AWS_EC2_METADATA_DISABLED":        "true",
		"AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
		"AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
	} {
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, v)
		}
	}
}
