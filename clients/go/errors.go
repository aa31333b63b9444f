// Error, decoded from the status and google.rpc details of a failed RPC,
// and the sentinels it matches with errors.Is.

package stepwell

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "stepwell.dev/client/gen/stepwell/v1"
)

// Domain is the google.rpc.ErrorInfo domain of the sidecar's errors.
const Domain = "stepwell.dev"

// Error is a failed stepwell RPC. Every error the client returns for an RPC
// is an *Error (match it with errors.As) and matches the sentinel of its
// reason with errors.Is, e.g. errors.Is(err, stepwell.ErrLeaseLost).
type Error struct {
	Code       codes.Code        // the gRPC status code
	Message    string            // the status message
	Reason     string            // the google.rpc.ErrorInfo reason ("" when none was sent)
	Field      string            // the first google.rpc.BadRequest field violation's field, or ""
	Metadata   map[string]string // the ErrorInfo metadata
	Violations []FieldViolation  // every BadRequest field violation
	cause      error
}

// FieldViolation is one google.rpc.BadRequest field violation.
type FieldViolation struct {
	Field       string
	Description string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("stepwell: ")
	b.WriteString(e.Code.String())
	if e.Reason != "" {
		b.WriteString(" " + e.Reason)
	}
	if e.Field != "" {
		b.WriteString(" (field " + e.Field + ")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if len(e.Metadata) > 0 {
		keys := make([]string, 0, len(e.Metadata))
		for k := range e.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + e.Metadata[k]
		}
		b.WriteString(" [" + strings.Join(parts, " ") + "]")
	}
	return b.String()
}

// LimitBytes returns the sidecar's message size limit of a MESSAGE_TOO_LARGE
// error (ErrorInfo metadata limit_bytes); ok is false when the error carries
// none.
func (e *Error) LimitBytes() (limit int64, ok bool) {
	raw, found := e.Metadata["limit_bytes"]
	if !found {
		return 0, false
	}
	limit, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, false
	}
	return limit, true
}

// Unwrap returns the underlying cause (the context error for a deadline or
// cancellation, when known; gRPC's own error for a lost connection).
func (e *Error) Unwrap() error { return e.cause }

// GRPCStatus lets status.FromError / status.Code see the original code.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// Is matches the sentinels: a reason sentinel matches an error of that
// reason, a code sentinel (ErrInvalidArgument, ErrUnavailable, ...) an error
// of that code.
func (e *Error) Is(target error) bool {
	s, ok := target.(*sentinel)
	if !ok {
		return false
	}
	if s.reason != "" {
		return e.Reason == s.reason
	}
	return e.Code == s.code
}

type sentinel struct {
	reason string
	code   codes.Code
	text   string
}

func (s *sentinel) Error() string { return "stepwell: " + s.text }

// Sentinels, named after the google.rpc.ErrorInfo reasons (or codes).
var (
	ErrCheckpointConflict      error = &sentinel{reason: "CHECKPOINT_CONFLICT", text: "checkpoint conflict"}
	ErrWorkflowVersionMismatch error = &sentinel{reason: "WORKFLOW_VERSION_MISMATCH", text: "workflow version mismatch"}
	ErrKeyReused               error = &sentinel{reason: "KEY_REUSED", text: "key reused"}
	ErrLeaseLost               error = &sentinel{reason: "LEASE_LOST", text: "lease lost"}
	ErrNotAcquired             error = &sentinel{reason: "NOT_ACQUIRED", text: "not acquired"}
	ErrResultMismatch          error = &sentinel{reason: "RESULT_MISMATCH", text: "result mismatch"}
	ErrKeyNotFound             error = &sentinel{reason: "KEY_NOT_FOUND", text: "key not found"}
	// ErrOverloaded: RESOURCE_EXHAUSTED / OVERLOADED, too many requests in
	// flight or the write queue is full; nothing was stored. The client
	// retries it with backoff.
	ErrOverloaded error = &sentinel{reason: "OVERLOADED", text: "overloaded"}
	// ErrMessageTooLarge: RESOURCE_EXHAUSTED / MESSAGE_TOO_LARGE, the request
	// message is over the sidecar's --message-bytes-max (see
	// Error.LimitBytes); nothing was stored. Never retried: the same request
	// can never fit.
	ErrMessageTooLarge error = &sentinel{reason: "MESSAGE_TOO_LARGE", text: "message too large"}
	// ErrStoreFull: RESOURCE_EXHAUSTED / STORE_FULL, the sidecar's disk or
	// SQLite size cap is full; nothing was stored. Reads still work; writes
	// succeed again only after an operator frees space (deletes turns), so
	// the client does not retry it.
	ErrStoreFull error = &sentinel{reason: "STORE_FULL", text: "store full"}
	// ErrOperationFailed: Once found the key's record FAILED (a permanent release).
	ErrOperationFailed error = &sentinel{reason: "FAILED", text: "operation failed"}
	// ErrOnceTimeout: Once waited longer than its wait timeout for another holder.
	ErrOnceTimeout error = &sentinel{reason: "IN_PROGRESS", text: "still in progress"}

	ErrInvalidArgument error = &sentinel{code: codes.InvalidArgument, text: "invalid argument"}
	ErrUnavailable     error = &sentinel{code: codes.Unavailable, text: "unavailable"}
	// ErrUnauthenticated: UNAUTHENTICATED, the call carried no token (or
	// client certificate) the sidecar knows. Never retried: the same
	// credentials fail again.
	ErrUnauthenticated error = &sentinel{code: codes.Unauthenticated, text: "unauthenticated"}
	// ErrPermissionDenied: PERMISSION_DENIED, the caller is known but has no
	// grant of the needed role for the request's namespace. Never retried.
	ErrPermissionDenied error = &sentinel{code: codes.PermissionDenied, text: "permission denied"}
	ErrDeadlineExceeded error = &sentinel{code: codes.DeadlineExceeded, text: "deadline exceeded"}

	// ErrWaitSettled: ALREADY_EXISTS / WAIT_SETTLED, a Signal or CancelWait
	// of a wait that another call settled otherwise. The error is a
	// *WaitError whose Wait is the winner.
	ErrWaitSettled error = &sentinel{reason: "WAIT_SETTLED", text: "wait already settled"}
	// ErrWaitNotFound: NOT_FOUND / WAIT_NOT_FOUND, an Await, GetWait of a
	// wait that does not exist (or was deleted with its turn).
	ErrWaitNotFound error = &sentinel{reason: "WAIT_NOT_FOUND", text: "wait not found"}
	// ErrWaitExpired: WaitForSignal or SleepUntil found the wait EXPIRED
	// (its expire_at passed before anything settled it); a *WaitError.
	ErrWaitExpired error = &sentinel{reason: "WAIT_EXPIRED", text: "wait expired"}
	// ErrWaitCancelled: WaitForSignal or SleepUntil found the wait CANCELLED
	// (by CancelWait); a *WaitError.
	ErrWaitCancelled error = &sentinel{reason: "WAIT_CANCELLED", text: "wait cancelled"}
	// ErrWaitTimeout: the context of WaitForSignal or SleepUntil reached its
	// deadline with the wait still PENDING; a *WaitError, which also matches
	// context.DeadlineExceeded. The wait stays as it was: asking again
	// later finds it.
	ErrWaitTimeout error = &sentinel{reason: "WAIT_TIMEOUT", text: "wait timed out"}
)

// WaitError is a wait that did not give the call what it wanted: settled by
// another call (ErrWaitSettled), EXPIRED or CANCELLED (ErrWaitExpired,
// ErrWaitCancelled), or still PENDING when the caller's deadline came
// (ErrWaitTimeout). Match the kind with errors.Is; errors.As also finds the
// *Error with its Code and Reason.
type WaitError struct {
	// Wait is the wait: for ErrWaitSettled the winner, its payload
	// included; otherwise the wait as last read (PENDING for
	// ErrWaitTimeout). Nil only when the sidecar sent no WaitSettled detail.
	Wait *pb.Wait
	// PayloadOmitted: the sidecar left the winner's payload out of the
	// error (too large for its trailers) and reading it with GetWait failed
	// as well, so Wait.Payload is empty.
	PayloadOmitted bool
	err            *Error
	cause          error // the context's error, for ErrWaitTimeout
}

func (e *WaitError) Error() string { return e.err.Error() }

// Unwrap returns the *Error (code and reason) and, for ErrWaitTimeout, the
// context's error.
func (e *WaitError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.err, e.cause}
	}
	return []error{e.err}
}

// GRPCStatus lets status.FromError / status.Code see the code.
func (e *WaitError) GRPCStatus() *status.Status { return e.err.GRPCStatus() }

// FromError converts a gRPC error into an *Error, decoding ErrorInfo and
// BadRequest details; a WAIT_SETTLED becomes a *WaitError, whose Wait is
// the winner the stepwell.v1.WaitSettled detail carries. nil stays nil; an
// *Error (or an error wrapping one) is returned as is.
func FromError(err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	e := &Error{Code: st.Code(), Message: st.Message(), Metadata: map[string]string{}}
	if errors.Is(err, contextCanceled) || errors.Is(err, contextDeadline) {
		e.cause = err
	}
	var settled *pb.WaitSettled
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *pb.WaitSettled:
			settled = d
		case *errdetails.ErrorInfo:
			if e.Reason == "" {
				e.Reason = d.GetReason()
				for k, v := range d.GetMetadata() {
					e.Metadata[k] = v
				}
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.Violations = append(e.Violations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	if len(e.Violations) > 0 {
		e.Field = e.Violations[0].Field
	}
	if e.Reason == "WAIT_SETTLED" {
		return &WaitError{Wait: settled.GetWait(), PayloadOmitted: settled.GetPayloadOmitted(), err: e}
	}
	return e
}

// fromCall is FromError for the error of an RPC made with ctx, with a lost
// connection reported as UNAVAILABLE (see connectionLost); the original
// error stays reachable with errors.Unwrap.
func fromCall(ctx context.Context, err error) error {
	converted := FromError(err)
	e, ok := converted.(*Error)
	if !ok || !connectionLost(ctx, e) {
		return converted
	}
	e.Code = codes.Unavailable
	e.Message = "connection to the sidecar lost: " + e.Message
	e.cause = err
	return e
}

// connectionLost reports whether e is the transport's report of a
// connection to the sidecar that went away mid-call, which is then
// UNAVAILABLE (and retried) like a connection that cannot be made. gRPC
// itself reports a read or write that failed on the connection (EOF, a
// reset, a broken pipe), GOAWAY and a closing transport as UNAVAILABLE
// already; it reports a call whose stream the peer reset (RST_STREAM with
// CANCEL, as a proxy in between does when it loses the sidecar) as
// CANCELLED. Such a CANCELLED is a lost connection unless the sidecar sent
// it (every status of the sidecar's own carries an ErrorInfo, e.g.
// BODY_BROKEN_OFF) or the caller cancelled the call (its context is done).
func connectionLost(ctx context.Context, e *Error) bool {
	return e.Code == codes.Canceled && e.Reason == "" && ctx.Err() == nil
}

func newError(code codes.Code, reason, msg string, md map[string]string) *Error {
	return &Error{Code: code, Reason: reason, Message: msg, Metadata: md}
}
