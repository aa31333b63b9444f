// Once: run a side effect at most once per key on IdempotencyService.

package stepwell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	pb "stepwell.dev/client/gen/stepwell/v1"
)

// OnceInfo is what fn learns about its acquisition.
type OnceInfo struct {
	Key        string
	LeaseToken uint64
	Attempt    uint32
	// PreviousLeaseExpired: an earlier holder's lease ran out without
	// Complete or Release, so the effect may already have happened: check
	// the downstream system before acting.
	PreviousLeaseExpired bool
}

// OnceOptions tunes Once; the zero value means the defaults.
type OnceOptions struct {
	Fingerprint []byte        // optional hash of the operation's parameters
	Lease       time.Duration // default 30 s
	Retention   time.Duration // default: the sidecar's (7 days)
	Heartbeat   time.Duration // Extend interval, default Lease/3
	WaitTimeout time.Duration // how long to wait for another holder, default 60 s
	PollEvery   time.Duration // first poll interval while IN_PROGRESS, default 50 ms
}

// StepKey is the idempotency key of a step of a run: runID + "/" + step.
func StepKey(runID, step string) string { return runID + "/" + step }

// onceDefaults is the first of opts (or the zero value) with the defaults
// in place of its zero fields.
func onceDefaults(opts []OnceOptions) OnceOptions {
	var o OnceOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = max(o.Lease/3, 10*time.Millisecond)
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = 60 * time.Second
	}
	if o.PollEvery <= 0 {
		o.PollEvery = 50 * time.Millisecond
	}
	return o
}

// Once runs fn at most once per key (across processes and sidecars sharing
// a store) and returns its result, JSON round-tripped:
//
//   - ACQUIRED: fn runs while a goroutine Extends the lease; its result is
//     JSON-encoded and Completed, a Complete that fails UNAVAILABLE being
//     sent again for as long as the lease lasts and ctx allows (so a
//     sidecar restart shorter than the lease does not repeat the effect;
//     a holder that dies before its Complete is recorded leaves the lease
//     to run out, and the next Once runs fn again, PreviousLeaseExpired).
//     If fn fails, the lease is Released (not permanently) and fn's error
//     returned.
//   - COMPLETED: the recorded result is decoded into T; fn is not called.
//   - IN_PROGRESS: waits (at most WaitTimeout overall) and asks again;
//     then an error matching ErrOnceTimeout.
//   - FAILED: an error matching ErrOperationFailed with the recorded error.
func Once[T any](ctx context.Context, c *Client, key string, fn func(context.Context, OnceInfo) (T, error), opts ...OnceOptions) (T, error) {
	o := onceDefaults(opts)
	var zero T
	deadline := time.Now().Add(o.WaitTimeout)
	sleep := o.PollEvery
	for {
		req := &pb.BeginRequest{Key: key, Fingerprint: o.Fingerprint, Lease: Duration(o.Lease)}
		if o.Retention > 0 {
			req.Retention = Duration(o.Retention)
		}
		sent := time.Now()
		r, err := c.Begin(ctx, req)
		if err != nil {
			return zero, err
		}
		switch r.GetOutcome() {
		case pb.BeginOutcome_BEGIN_OUTCOME_COMPLETED:
			var v T
			if err := json.Unmarshal(r.GetResult(), &v); err != nil {
				return zero, fmt.Errorf("stepwell: decoding the recorded result of %q: %w", key, err)
			}
			return v, nil
		case pb.BeginOutcome_BEGIN_OUTCOME_FAILED:
			return zero, newError(codes.FailedPrecondition, "FAILED", r.GetError(), map[string]string{"key": key})
		case pb.BeginOutcome_BEGIN_OUTCOME_ACQUIRED:
			return runAcquired(ctx, c, key, r, newHeldLease(sent, o.Lease), fn, o)
		}
		// IN_PROGRESS: wait for the holder, bounded.
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return zero, newError(codes.DeadlineExceeded, "IN_PROGRESS",
				fmt.Sprintf("key %q still in progress after %s", key, o.WaitTimeout), map[string]string{"key": key})
		}
		wait := min(sleep, remaining)
		if exp := r.GetLeaseExpiresAt(); exp != nil {
			wait = min(wait, max(time.Until(exp.AsTime()), 5*time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, FromError(ctx.Err())
		case <-t.C:
		}
		sleep = min(sleep*2, time.Second)
	}
}

// heldLease is, on the holder's own clock, a time before which its lease
// certainly has not run out: the moment the last Begin or Extend that the
// sidecar granted was sent, plus the lease. The sidecar counts the lease
// from when it got the call, which is later, so no clocks need to agree.
type heldLease struct {
	mu    sync.Mutex
	until time.Time
}

func newHeldLease(sent time.Time, lease time.Duration) *heldLease {
	return &heldLease{until: sent.Add(lease)}
}

// renewed records a grant of lease to a call sent at sent.
func (l *heldLease) renewed(sent time.Time, lease time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := sent.Add(lease); t.After(l.until) {
		l.until = t
	}
}

func (l *heldLease) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// heartbeat Extends the lease every o.Heartbeat until stop is closed or the
// lease is lost, recording each grant in lease.
func heartbeat(ctx context.Context, c *Client, key string, token uint64, lease *heldLease, o OnceOptions, stop <-chan struct{}) {
	t := time.NewTicker(o.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			sent := time.Now()
			_, err := c.Extend(context.WithoutCancel(ctx), &pb.ExtendRequest{Key: key, LeaseToken: token, Lease: Duration(o.Lease)})
			if err == nil {
				lease.renewed(sent, o.Lease)
			}
			if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotAcquired) {
				return
			}
		}
	}
}

func runAcquired[T any](ctx context.Context, c *Client, key string, r *pb.BeginResponse, lease *heldLease, fn func(context.Context, OnceInfo) (T, error), o OnceOptions) (T, error) {
	var zero T
	info := OnceInfo{Key: key, LeaseToken: r.GetLeaseToken(), Attempt: r.GetAttempt(), PreviousLeaseExpired: r.GetPreviousLeaseExpired()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		heartbeat(ctx, c, key, info.LeaseToken, lease, o, stop)
	}()
	v, err := fn(ctx, info)
	close(stop)
	wg.Wait()
	// Release and Complete run even if ctx was cancelled by now.
	bg := context.WithoutCancel(ctx)
	if err != nil {
		msg := err.Error()
		if len(msg) > 16000 {
			msg = msg[:16000]
		}
		_, _ = c.Release(bg, &pb.ReleaseRequest{Key: key, LeaseToken: info.LeaseToken, Error: msg})
		return zero, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		_, _ = c.Release(bg, &pb.ReleaseRequest{Key: key, LeaseToken: info.LeaseToken, Error: err.Error()})
		return zero, fmt.Errorf("stepwell: encoding the result of %q: %w", key, err)
	}
	req := &pb.CompleteRequest{Key: key, LeaseToken: info.LeaseToken, Result: raw}
	if err := completeHeld(ctx, c, req, lease); err != nil {
		return zero, err
	}
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		return zero, err
	}
	return out, nil
}

// completeHeld records the result under the lease. The holder with a
// result in hand is the only one who may record it (its fencing token says
// so), and if it gave up the lease would run out and the next Once would
// run the effect again. So a Complete that fails UNAVAILABLE or OVERLOADED
// after the client's own retries (a sidecar restarting, a connection lost)
// is sent again, with backoff, for as long as the lease lasts and ctx
// allows. The first attempt is made even when ctx has ended already; the
// later ones are bounded by ctx and by the lease.
func completeHeld(ctx context.Context, c *Client, req *pb.CompleteRequest, lease *heldLease) error {
	_, err := c.Complete(context.WithoutCancel(ctx), req)
	backoff := c.opts.backoff
	for err != nil && retryable(err) {
		until := lease.deadline()
		if !time.Now().Before(until) || ctx.Err() != nil {
			break
		}
		if !pause(ctx, min(jittered(backoff), time.Until(until))) {
			break
		}
		backoff = min(backoff*2, c.opts.maxBackoff)
		attempt, cancel := context.WithDeadline(ctx, until)
		_, err = c.Complete(attempt, req)
		cancel()
	}
	return err
}
