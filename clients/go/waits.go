// Waits: the six WaitService RPCs, one method each, and the three calls a
// run pauses with: Signal, WaitForSignal (for a person, a webhook) and
// SleepUntil (for a clock). A wait lives in the sidecar's store, so a run
// that restarts on another worker finds the wait, and its timer, it made
// before.

package stepwell

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	pb "stepwell.dev/client/gen/stepwell/v1"
)

// awaitPollMax is the longest single Await of WaitForSignal and SleepUntil,
// and the sidecar's default Await timeout: a long wait is a chain of such
// polls, so that no call outlives a proxy's idle timeout.
const awaitPollMax = 60 * time.Second

// CreateWait creates a PENDING wait, or returns the one that exists: the
// first creation of a wait stands, whatever a repeat asks for.
func (c *Client) CreateWait(ctx context.Context, req *pb.CreateWaitRequest) (*pb.CreateWaitResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.waits.CreateWait)
}

// SignalWait is the Signal RPC (the name Signal is the call above it): it
// resolves a wait with a payload. A wait settled otherwise is a *WaitError
// matching ErrWaitSettled, whose Wait is the winner, payload included (read
// with GetWait when the sidecar left it out of the error).
func (c *Client) SignalWait(ctx context.Context, req *pb.SignalRequest) (*pb.SignalResponse, error) {
	resp, err := invoke(ctx, c, withNamespace(c, req), c.waits.Signal)
	return resp, c.withWinner(ctx, err)
}

// Await answers as soon as the wait is settled, or with it still PENDING
// after req.Timeout (default 60 s). Without a deadline in ctx the call gets
// that timeout plus the client's WithTimeout, rather than WithTimeout alone,
// so that the sidecar's answer, not the client, ends the long poll.
func (c *Client) Await(ctx context.Context, req *pb.AwaitRequest) (*pb.AwaitResponse, error) {
	if _, ok := ctx.Deadline(); !ok && c.opts.timeout > 0 {
		poll := awaitPollMax
		if req.GetTimeout() != nil {
			poll = req.GetTimeout().AsDuration()
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, poll+c.opts.timeout)
		defer cancel()
	}
	return invoke(ctx, c, withNamespace(c, req), c.waits.Await)
}

// GetWait reads a wait; an unknown one is ErrWaitNotFound.
func (c *Client) GetWait(ctx context.Context, req *pb.GetWaitRequest) (*pb.GetWaitResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.waits.GetWait)
}

// ListWaits returns one page of a namespace's waits.
func (c *Client) ListWaits(ctx context.Context, req *pb.ListWaitsRequest) (*pb.ListWaitsResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.waits.ListWaits)
}

// CancelWait settles a wait CANCELLED. A wait settled otherwise is a
// *WaitError matching ErrWaitSettled, as for SignalWait.
func (c *Client) CancelWait(ctx context.Context, req *pb.CancelWaitRequest) (*pb.CancelWaitResponse, error) {
	resp, err := invoke(ctx, c, withNamespace(c, req), c.waits.CancelWait)
	return resp, c.withWinner(ctx, err)
}

// withWinner completes the winner of a WAIT_SETTLED error: the sidecar
// leaves a payload out of the error when it would make the trailers too
// large, and GetWait reads it. When that read fails too, the error keeps
// PayloadOmitted set rather than hide the settlement behind a read error.
func (c *Client) withWinner(ctx context.Context, err error) error {
	var we *WaitError
	if !errors.As(err, &we) || we.Wait == nil || !we.PayloadOmitted {
		return err
	}
	w := we.Wait
	got, gerr := c.GetWait(ctx, &pb.GetWaitRequest{Namespace: w.GetNamespace(), TurnId: w.GetTurnId(), Name: w.GetName()})
	if gerr == nil {
		we.Wait, we.PayloadOmitted = got.GetWait(), false
	}
	return err
}

// WaitOptions tunes Signal, WaitForSignal and SleepUntil; the zero value
// means the defaults.
type WaitOptions struct {
	// Namespace of the wait; "" means the client's (WithNamespace).
	Namespace string
}

func waitNamespace(opts []WaitOptions) string {
	if len(opts) > 0 {
		return opts[0].Namespace
	}
	return ""
}

// Signal resolves the wait name of the turn turnID with payload, creating
// it RESOLVED if the run has not made it yet (a signal that comes first is
// never lost). It returns true when this call settled the wait and false
// when it repeated the winning signal (the same payload); a wait settled
// otherwise is a *WaitError matching ErrWaitSettled, whose Wait is the
// winner. A call the client resent after losing its connection reports
// false if the first attempt had settled the wait.
func (c *Client) Signal(ctx context.Context, turnID, name string, payload []byte, opts ...WaitOptions) (bool, error) {
	resp, err := c.SignalWait(ctx, &pb.SignalRequest{
		Namespace: waitNamespace(opts), TurnId: turnID, Name: name, Payload: payload,
	})
	if err != nil {
		return false, err
	}
	return resp.GetSettled(), nil
}

// WaitForSignal creates the wait name of the turn turnID if it does not
// exist yet, waits until it is settled and returns the payload it was
// resolved with. The wait is bounded by ctx only: without a deadline it
// waits for as long as it takes, in Awaits of at most 60 s each, and
// retries UNAVAILABLE, in making the wait as in waiting on it (a sidecar
// that is down when the call begins, or restarts under the waiting run),
// until the context ends. A wait EXPIRED or CANCELLED is a *WaitError matching
// ErrWaitExpired or ErrWaitCancelled; one still PENDING at ctx's deadline
// is a *WaitError matching ErrWaitTimeout (and context.DeadlineExceeded).
func (c *Client) WaitForSignal(ctx context.Context, turnID, name string, opts ...WaitOptions) ([]byte, error) {
	created, err := c.beginWait(ctx, &pb.CreateWaitRequest{Namespace: waitNamespace(opts), TurnId: turnID, Name: name})
	if err != nil {
		return nil, err
	}
	w, err := c.awaitSettled(ctx, created.GetWait())
	if err != nil {
		return nil, err
	}
	return w.GetPayload(), nil
}

// SleepUntil is a durable sleep: it creates the wait name of the turn turnID
// with its timer at when, and returns once the wait is RESOLVED, by its
// timer or by a Signal that wakes the run early. The first creation of the
// wait stands, so a run that resumes after a restart keeps the time it
// chose first: after that time it returns at once (as soon as the timer has
// fired), before it only waits the rest. Errors are those of WaitForSignal.
func (c *Client) SleepUntil(ctx context.Context, turnID, name string, when time.Time, opts ...WaitOptions) error {
	created, err := c.beginWait(ctx, &pb.CreateWaitRequest{
		Namespace: waitNamespace(opts), TurnId: turnID, Name: name, ResolveAt: Timestamp(when),
	})
	if err != nil {
		return err
	}
	_, err = c.awaitSettled(ctx, created.GetWait())
	return err
}

// beginWait is CreateWait for WaitForSignal and SleepUntil: a CreateWait
// that fails UNAVAILABLE or OVERLOADED after the client's own retries (a
// sidecar that is down or restarting when the run begins to wait) is sent
// again, after a backoff, for as long as ctx allows, as awaitSettled does
// with the Awaits. When ctx ends first, the error is ctx's: at its deadline
// it matches ErrDeadlineExceeded and context.DeadlineExceeded.
func (c *Client) beginWait(ctx context.Context, req *pb.CreateWaitRequest) (*pb.CreateWaitResponse, error) {
	backoff := c.opts.backoff
	for {
		resp, err := c.CreateWait(ctx, req)
		switch {
		case err == nil:
			return resp, nil
		case ctx.Err() != nil:
			return nil, FromError(ctx.Err())
		case !retryable(err):
			return nil, err
		}
		if !pause(ctx, jittered(backoff)) {
			return nil, FromError(ctx.Err())
		}
		backoff = min(backoff*2, c.opts.maxBackoff)
	}
}

// awaitSettled long-polls Await until w is settled and returns it RESOLVED,
// or the *WaitError of how else it ended. Each poll lasts at most
// awaitPollMax, or what is left of ctx's deadline. A poll that fails
// UNAVAILABLE after the client's own retries is asked again, after a
// backoff, for as long as ctx allows: the wait itself is safe in the store.
func (c *Client) awaitSettled(ctx context.Context, w *pb.Wait) (*pb.Wait, error) {
	backoff := c.opts.backoff
	for w.GetStatus() == pb.WaitStatus_WAIT_STATUS_PENDING {
		poll := awaitPollMax
		deadline, bounded := ctx.Deadline()
		if bounded {
			poll = min(poll, time.Until(deadline))
		}
		if poll <= 0 || ctx.Err() != nil {
			return nil, contextEnded(ctx, w)
		}
		resp, err := c.Await(ctx, &pb.AwaitRequest{
			Namespace: w.GetNamespace(), TurnId: w.GetTurnId(), Name: w.GetName(), Timeout: Duration(poll),
		})
		var se *Error
		switch {
		case err == nil:
			w, backoff = resp.GetWait(), c.opts.backoff
		case ctx.Err() != nil:
			return nil, contextEnded(ctx, w)
		case bounded && errors.As(err, &se) && se.Code == codes.DeadlineExceeded && se.Reason == "":
			// The sidecar saw the caller's deadline pass a moment before
			// the caller did: the next turn of the loop reports it.
		case retryable(err):
			if !pause(ctx, jittered(backoff)) {
				return nil, contextEnded(ctx, w)
			}
			backoff = min(backoff*2, c.opts.maxBackoff)
		default:
			return nil, err
		}
	}
	return settledAsWanted(w)
}

// pause sleeps for d, or less if ctx ends first; it reports whether it
// slept the whole d.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// contextEnded is the error of a wait still PENDING when the caller's
// context ended: ErrWaitTimeout at its deadline, the cancellation as it is
// otherwise.
func contextEnded(ctx context.Context, w *pb.Wait) error {
	cause := ctx.Err()
	if errors.Is(cause, context.Canceled) {
		return FromError(cause)
	}
	if cause == nil {
		// The deadline is reached, and the context's timer has yet to say so.
		cause = context.DeadlineExceeded
	}
	msg := fmt.Sprintf("wait %q of turn %q still pending at the caller's deadline", w.GetName(), w.GetTurnId())
	return &WaitError{Wait: w, err: newError(codes.DeadlineExceeded, "WAIT_TIMEOUT", msg, nil), cause: cause}
}

// settledAsWanted returns a RESOLVED wait, and the *WaitError of any other
// settlement.
func settledAsWanted(w *pb.Wait) (*pb.Wait, error) {
	reason := ""
	switch w.GetStatus() {
	case pb.WaitStatus_WAIT_STATUS_RESOLVED:
		return w, nil
	case pb.WaitStatus_WAIT_STATUS_CANCELLED:
		reason = "WAIT_CANCELLED"
	case pb.WaitStatus_WAIT_STATUS_EXPIRED:
		reason = "WAIT_EXPIRED"
	default:
		return nil, fmt.Errorf("stepwell: the sidecar answered with a wait in status %v", w.GetStatus())
	}
	msg := fmt.Sprintf("wait %q of turn %q is %s", w.GetName(), w.GetTurnId(), w.GetStatus())
	return nil, &WaitError{Wait: w, err: newError(codes.FailedPrecondition, reason, msg, nil)}
}
