// Package errs classifies relayout failures so that the command line can map
// them to documented exit codes an orchestrator can act on:
//
//	0 ok
//	1 internal error (a bug: please report it)
//	2 usage or configuration error (fix the command line or config file)
//	3 bad input data (corrupt file, schema mismatch, missing column,
//	  unsupported type, encrypted file): retrying will not help
//	4 transient I/O error (network, object store, disk): safe to retry
//	5 precondition failed (an output already exists; pass --overwrite)
//
// Errors are classified once, where the cause is known, by wrapping them with
// one of the constructors below; errors.As finds the class through any number
// of fmt.Errorf("...: %w") wrappers added by the layers above.
package errs

import (
	"context"
	"errors"
	"fmt"
)

// Class is the kind of a failure; its numeric value is the process exit code.
type Class int

// The failure classes; each value is the exit code of the relayout command.
const (
	Internal     Class = 1
	Usage        Class = 2
	BadInput     Class = 3
	Transient    Class = 4
	Precondition Class = 5
)

func (c Class) String() string {
	switch c {
	case Usage:
		return "usage"
	case BadInput:
		return "bad input"
	case Transient:
		return "transient I/O"
	case Precondition:
		return "precondition"
	default:
		return "internal"
	}
}

// Error is an error with a class and an optional hint telling the user what to
// do about it.
type Error struct {
	Class Class
	Err   error
	Hint  string
}

func (e *Error) Error() string {
	if e.Hint != "" {
		return e.Err.Error() + " (" + e.Hint + ")"
	}
	return e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func wrap(c Class, err error, hint string) error {
	if err == nil {
		return nil
	}
	return &Error{Class: c, Err: err, Hint: hint}
}

// UsageErr marks err as a usage or configuration error (exit 2).
func UsageErr(err error) error { return wrap(Usage, err, "") }

// Usagef formats a usage or configuration error (exit 2).
func Usagef(format string, a ...any) error { return wrap(Usage, fmt.Errorf(format, a...), "") }

// BadInputErr marks err as bad input data (exit 3).
func BadInputErr(err error) error { return wrap(BadInput, err, "") }

// BadInputf formats a bad-input error (exit 3).
func BadInputf(format string, a ...any) error { return wrap(BadInput, fmt.Errorf(format, a...), "") }

// Or returns err with its class kept where it already has one, and class c
// where it has none. A canceled or expired context is transient (exit 4)
// whatever c says: the run was interrupted, the input is not at fault.
// Wrap the cause with %w so that its class stays findable:
//
//	errs.Or(errs.BadInput, fmt.Errorf("tensors: %w", err))
func Or(c Class, err error) error {
	if err == nil || ClassOf(err) != Internal {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return wrap(Transient, err, "")
	}
	return wrap(c, err, "")
}

// TransientErr marks err as a retryable I/O failure (exit 4).
func TransientErr(err error) error { return wrap(Transient, err, "") }

// Preconditionf formats a precondition failure (exit 5).
func Preconditionf(hint, format string, a ...any) error {
	return wrap(Precondition, fmt.Errorf(format, a...), hint)
}

// WithHint adds a hint to err, keeping its class (Internal if it has none).
func WithHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &Error{Class: ClassOf(err), Err: err, Hint: hint}
}

// ClassOf returns the class of err: the outermost classified error in its
// chain, or Internal when none is classified. ClassOf(nil) is 0.
func ClassOf(err error) Class {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return Internal
}

// Is reports whether err is of class c.
func Is(err error, c Class) bool { return ClassOf(err) == c }
