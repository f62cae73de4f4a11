package storage

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"gocloud.dev/gcerrors"

	"github.com/relayout/relayout/internal/errs"
)

// Classify marks an error from a bucket or file operation with its class:
// missing objects and permission problems are bad input (exit 3), everything
// else (network, throttling, timeouts, disk) is transient (exit 4). Errors that
// already carry a class keep it.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return errs.TransientErr(err)
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.PermissionDenied, gcerrors.InvalidArgument:
		return errs.BadInputErr(err)
	case gcerrors.Unknown, gcerrors.OK:
		return classifyOS(err)
	}
	return errs.TransientErr(err)
}

func classifyOS(err error) error {
	if err == nil {
		return nil
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return err
	}
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return errs.BadInputErr(err)
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR):
		// A folder read as an object (an empty or damaged name), or a
		// path through a file: no retry makes it an object.
		return errs.BadInputErr(err)
	case errors.Is(err, syscall.ENOSPC):
		return errs.TransientErr(err)
	}
	return errs.TransientErr(err)
}
