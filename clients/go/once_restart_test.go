// Once across a sidecar restart: a holder with its result in hand keeps
// retrying Complete while its lease lasts, so the effect is not repeated.

package stepwell_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	stepwell "stepwell.dev/client"
)

type onceOutcome struct {
	v   string
	err error
}

// within receives from ch, which must deliver within a bound generous
// enough for a busy machine.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(120 * time.Second):
		t.Fatalf("%s: nothing within 120s", what)
		var zero T
		return zero
	}
}

// The sidecar is SIGKILLed while the effect runs, and started again on the
// same port and SQLite file only once Complete has failed more often than
// the client's own retries: Once keeps sending it with its fencing token,
// records the result, and a second Once returns that result without
// running the effect.
func TestOnceCompleteAcrossSidecarRestart(t *testing.T) {
	s := newOwnSidecar(t)
	watch, retrying := afterFailures("Complete", 3)
	c := dialTo(t, s.target, stepwell.WithNamespace(freshNS(t, "oncerestart")), stepwell.WithRetry(2, 20*time.Millisecond), watch)
	started, proceed := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	var startedOnce sync.Once
	effect := func(context.Context, stepwell.OnceInfo) (string, error) {
		runs.Add(1)
		startedOnce.Do(func() { close(started) })
		<-proceed
		return "receipt-1", nil
	}
	// A lease long enough for a restart on a busy machine.
	opts := stepwell.OnceOptions{Lease: 2 * time.Minute}
	key := stepwell.StepKey("run-1", "charge")
	done := make(chan onceOutcome, 1)
	go func() {
		v, err := stepwell.Once(ctx, c, key, effect, opts)
		done <- onceOutcome{v, err}
	}()
	within(t, started, "the effect did not start")
	s.Stop()
	close(proceed)
	select {
	case <-retrying:
	case o := <-done:
		t.Fatalf("Once gave up on Complete within the client's own retries, with its lease still held: %q %v", o.v, o.err)
	case <-time.After(120 * time.Second):
		t.Fatal("Complete was not retried within 120s")
	}
	s.Start()
	if o := within(t, done, "Once did not return after the restart"); o.err != nil || o.v != "receipt-1" {
		t.Fatalf("Once across the restart: %q %v", o.v, o.err)
	}
	v, err := stepwell.Once(ctx, c, key, effect, opts)
	if err != nil || v != "receipt-1" {
		t.Fatalf("the second Once: %q %v", v, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the effect ran %d times", n)
	}
}
