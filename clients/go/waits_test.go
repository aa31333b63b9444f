// Tests of the waits (Signal, WaitForSignal, SleepUntil and the WaitService
// methods) against a real sidecar.

package stepwell_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

// outcome is what a call running in a goroutine returned.
type outcome struct {
	payload []byte
	err     error
}

// inBackground runs f in a goroutine; receive its outcome with await.
func inBackground(f func() ([]byte, error)) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		p, err := f()
		ch <- outcome{p, err}
	}()
	return ch
}

// await receives the outcome of a background call, which must come within
// a bound generous enough for a busy machine.
func await(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(120 * time.Second):
		t.Fatal("the background call did not return within 120s")
		return outcome{}
	}
}

// getWait reads a wait, which must exist.
func getWait(t *testing.T, c *stepwell.Client, turn, name string) *pb.Wait {
	t.Helper()
	r, err := c.GetWait(ctx, &pb.GetWaitRequest{TurnId: turn, Name: name})
	if err != nil {
		t.Fatalf("GetWait %s/%s: %v", turn, name, err)
	}
	return r.GetWait()
}

// untilWaitExists polls until the wait has been created (by a call running
// in the background), bounded.
func untilWaitExists(t *testing.T, c *stepwell.Client, turn, name string) *pb.Wait {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := c.GetWait(ctx, &pb.GetWaitRequest{TurnId: turn, Name: name})
		if err == nil {
			return r.GetWait()
		}
		if !errors.Is(err, stepwell.ErrWaitNotFound) || time.Now().After(deadline) {
			t.Fatalf("GetWait %s/%s: %v", turn, name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitError returns err as a *WaitError matching kind.
func waitError(t *testing.T, err, kind error) *stepwell.WaitError {
	t.Helper()
	var we *stepwell.WaitError
	if !errors.Is(err, kind) || !errors.As(err, &we) {
		t.Fatalf("want a *WaitError matching %v, got %T %v", kind, err, err)
	}
	return we
}

func TestWaitSignalBeforeWait(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "waits")))
	settled, err := c.Signal(ctx, "run-1", "approve", []byte("yes"))
	if err != nil || !settled {
		t.Fatalf("Signal of a wait not made yet: %v %v", settled, err)
	}
	got, err := c.WaitForSignal(ctx, "run-1", "approve")
	if err != nil || string(got) != "yes" {
		t.Fatalf("WaitForSignal after the signal: %q %v", got, err)
	}
}

func TestWaitSignalWakesWaiter(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "waits")))
	waiter := inBackground(func() ([]byte, error) { return c.WaitForSignal(ctx, "run-1", "approve") })
	if w := untilWaitExists(t, c, "run-1", "approve"); w.GetStatus() != pb.WaitStatus_WAIT_STATUS_PENDING {
		t.Fatalf("the waiter's wait before the signal: %v", w)
	}
	settled, err := c.Signal(ctx, "run-1", "approve", []byte("yes"))
	if err != nil || !settled {
		t.Fatalf("Signal: %v %v", settled, err)
	}
	if o := await(t, waiter); o.err != nil || string(o.payload) != "yes" {
		t.Fatalf("WaitForSignal: %q %v", o.payload, o.err)
	}
}

func TestWaitSignalRepeatAndConflict(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "waits")))
	if settled, err := c.Signal(ctx, "run-1", "approve", []byte("yes")); err != nil || !settled {
		t.Fatalf("first Signal: %v %v", settled, err)
	}
	if settled, err := c.Signal(ctx, "run-1", "approve", []byte("yes")); err != nil || settled {
		t.Fatalf("repeated Signal: want false, nil; got %v %v", settled, err)
	}
	_, err := c.Signal(ctx, "run-1", "approve", []byte("no"))
	we := waitError(t, err, stepwell.ErrWaitSettled)
	if string(we.Wait.GetPayload()) != "yes" || we.Wait.GetStatus() != pb.WaitStatus_WAIT_STATUS_RESOLVED || we.PayloadOmitted {
		t.Fatalf("the winner in the error: %v (payload omitted %v)", we.Wait, we.PayloadOmitted)
	}
	var se *stepwell.Error
	if !errors.As(err, &se) || se.Code != codes.AlreadyExists || se.Reason != "WAIT_SETTLED" {
		t.Fatalf("errors.As *Error: %v", err)
	}
	// A winner too large for the error's trailers is read with GetWait.
	big := bytes.Repeat([]byte("w"), 16*1024)
	if _, err := c.Signal(ctx, "run-2", "approve", big); err != nil {
		t.Fatal(err)
	}
	_, err = c.Signal(ctx, "run-2", "approve", []byte("no"))
	if we := waitError(t, err, stepwell.ErrWaitSettled); !bytes.Equal(we.Wait.GetPayload(), big) || we.PayloadOmitted {
		t.Fatalf("a large winner: %d bytes, payload omitted %v", len(we.Wait.GetPayload()), we.PayloadOmitted)
	}
}

func TestWaitExpired(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "waits")))
	expire := stepwell.Timestamp(time.Now().Add(time.Second))
	if _, err := c.CreateWait(ctx, &pb.CreateWaitRequest{TurnId: "run-1", Name: "approve", ExpireAt: expire}); err != nil {
		t.Fatal(err)
	}
	_, err := c.WaitForSignal(ctx, "run-1", "approve")
	we := waitError(t, err, stepwell.ErrWaitExpired)
	if we.Wait.GetStatus() != pb.WaitStatus_WAIT_STATUS_EXPIRED || we.Wait.GetSettledBy() != "stepwell:expiry" {
		t.Fatalf("the expired wait: %v", we.Wait)
	}
}

func TestWaitCancelled(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "waits")))
	waiter := inBackground(func() ([]byte, error) { return c.WaitForSignal(ctx, "run-1", "approve") })
	untilWaitExists(t, c, "run-1", "approve")
	r, err := c.CancelWait(ctx, &pb.CancelWaitRequest{TurnId: "run-1", Name: "approve"})
	if err != nil || !r.GetCancelled() {
		t.Fatalf("CancelWait: %v %v", r, err)
	}
	o := await(t, waiter)
	if we := waitError(t, o.err, stepwell.ErrWaitCancelled); we.Wait.GetStatus() != pb.WaitStatus_WAIT_STATUS_CANCELLED {
		t.Fatalf("the cancelled wait: %v", we.Wait)
	}
	if r, err := c.CancelWait(ctx, &pb.CancelWaitRequest{TurnId: "run-1", Name: "approve"}); err != nil || r.GetCancelled() {
		t.Fatalf("CancelWait again: want cancelled false, got %v %v", r, err)
	}
	// Cancelling a resolved wait is refused, with the winner.
	if _, err := c.Signal(ctx, "run-2", "approve", []byte("yes")); err != nil {
		t.Fatal(err)
	}
	_, err = c.CancelWait(ctx, &pb.CancelWaitRequest{TurnId: "run-2", Name: "approve"})
	if we := waitError(t, err, stepwell.ErrWaitSettled); string(we.Wait.GetPayload()) != "yes" {
		t.Fatalf("CancelWait of a resolved wait: %v", we.Wait)
	}
}

func TestWaitTimeout(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "waits")))
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := c.WaitForSignal(short, "run-1", "approve")
	we := waitError(t, err, stepwell.ErrWaitTimeout)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, stepwell.ErrDeadlineExceeded) || we.Wait.GetStatus() != pb.WaitStatus_WAIT_STATUS_PENDING {
		t.Fatalf("timeout: %v, wait %v", err, we.Wait)
	}
	if w := getWait(t, c, "run-1", "approve"); w.GetStatus() != pb.WaitStatus_WAIT_STATUS_PENDING {
		t.Fatalf("the wait after the timeout: %v", w)
	}
	// A cancelled context is the cancellation, not a timeout.
	gone, stop := context.WithCancel(ctx)
	stop()
	_, err = c.WaitForSignal(gone, "run-1", "approve")
	var se *stepwell.Error
	if errors.Is(err, stepwell.ErrWaitTimeout) || !errors.As(err, &se) || se.Code != codes.Canceled {
		t.Fatalf("a cancelled context: %v", err)
	}
}

func TestWaitSleepUntilPast(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "waits")))
	if err := c.SleepUntil(ctx, "run-1", "nap", time.Now().Add(-time.Hour)); err != nil {
		t.Fatalf("SleepUntil an hour ago: %v", err)
	}
	if w := getWait(t, c, "run-1", "nap"); w.GetStatus() != pb.WaitStatus_WAIT_STATUS_RESOLVED || w.GetSettledBy() != "stepwell:timer" {
		t.Fatalf("the nap: %v", w)
	}
}

func TestWaitSleepUntilTimer(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "waits")))
	// Microseconds, which every store keeps exactly.
	when := time.Now().Add(time.Second).Truncate(time.Microsecond)
	if err := c.SleepUntil(ctx, "run-1", "nap", when); err != nil {
		t.Fatalf("SleepUntil: %v", err)
	}
	w := getWait(t, c, "run-1", "nap")
	if w.GetStatus() != pb.WaitStatus_WAIT_STATUS_RESOLVED || w.GetSettledBy() != "stepwell:timer" || !w.GetResolveAt().AsTime().Equal(when) {
		t.Fatalf("the nap: %v", w)
	}
	// A resumed run asks for a later time; the first creation stands, so
	// it returns on the timer that fired already.
	if err := c.SleepUntil(ctx, "run-1", "nap", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("SleepUntil again: %v", err)
	}
}

func TestWaitSleepWokenOrCancelled(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "waits")))
	later := time.Now().Add(time.Hour)
	sleeper := inBackground(func() ([]byte, error) { return nil, c.SleepUntil(ctx, "run-1", "nap", later) })
	untilWaitExists(t, c, "run-1", "nap")
	if _, err := c.Signal(ctx, "run-1", "nap", nil); err != nil {
		t.Fatal(err)
	}
	if o := await(t, sleeper); o.err != nil {
		t.Fatalf("SleepUntil woken by a signal: %v", o.err)
	}
	sleeper = inBackground(func() ([]byte, error) { return nil, c.SleepUntil(ctx, "run-2", "nap", later) })
	untilWaitExists(t, c, "run-2", "nap")
	if _, err := c.CancelWait(ctx, &pb.CancelWaitRequest{TurnId: "run-2", Name: "nap"}); err != nil {
		t.Fatal(err)
	}
	waitError(t, await(t, sleeper).err, stepwell.ErrWaitCancelled)
}

func TestWaitHandle(t *testing.T) {
	ns := freshNS(t, "waits")
	c := dial(t, stepwell.WithNamespace(ns))
	r, err := c.CreateWait(ctx, &pb.CreateWaitRequest{TurnId: "run-1", Metadata: []byte(`{"ask":"ship it?"}`)})
	if err != nil || !r.GetCreated() || r.GetWait().GetName() == "" || r.GetWait().GetHandle() == "" {
		t.Fatalf("CreateWait without a name: %v %v", r, err)
	}
	handle := r.GetWait().GetHandle()
	// Whoever holds the handle signals it, whatever its client's namespace.
	other := dial(t, stepwell.WithNamespace(ns+"-other"))
	s, err := other.SignalWait(ctx, &pb.SignalRequest{Handle: handle, Payload: []byte("yes")})
	if err != nil || !s.GetSettled() || s.GetWait().GetNamespace() != ns {
		t.Fatalf("SignalWait by handle: %v %v", s, err)
	}
	a, err := other.Await(ctx, &pb.AwaitRequest{Handle: handle})
	if err != nil || string(a.GetWait().GetPayload()) != "yes" || a.GetWait().GetName() != r.GetWait().GetName() {
		t.Fatalf("Await by handle: %v %v", a, err)
	}
	got, err := c.WaitForSignal(ctx, "run-1", r.GetWait().GetName())
	if err != nil || string(got) != "yes" {
		t.Fatalf("WaitForSignal of the unnamed wait: %q %v", got, err)
	}
}

func TestWaitMethods(t *testing.T) {
	ns := freshNS(t, "waits")
	// A client timeout shorter than the Await: the Await's own timeout,
	// not the client's, ends the long poll.
	c := dial(t, stepwell.WithNamespace(ns), stepwell.WithTimeout(time.Second))
	if _, err := c.CreateWait(ctx, &pb.CreateWaitRequest{TurnId: "run-1", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	a, err := c.Await(ctx, &pb.AwaitRequest{TurnId: "run-1", Name: "a", Timeout: stepwell.Duration(2 * time.Second)})
	if err != nil || a.GetWait().GetStatus() != pb.WaitStatus_WAIT_STATUS_PENDING {
		t.Fatalf("Await past the client's timeout: %v %v", a, err)
	}
	if _, err := c.Await(ctx, &pb.AwaitRequest{TurnId: "run-1", Name: "nope"}); !errors.Is(err, stepwell.ErrWaitNotFound) {
		t.Fatalf("Await of an unknown wait: %v", err)
	}
	if _, err := c.Signal(ctx, "run-1", "b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	l, err := c.ListWaits(ctx, &pb.ListWaitsRequest{Status: pb.WaitStatus_WAIT_STATUS_PENDING})
	if err != nil || len(l.GetWaits()) != 1 || l.GetWaits()[0].GetName() != "a" {
		t.Fatalf("ListWaits PENDING: %v %v", l, err)
	}
	// The namespace option puts a wait in another namespace than the client's.
	in := stepwell.WaitOptions{Namespace: ns + "-b"}
	if _, err := c.Signal(ctx, "run-1", "c", []byte("z"), in); err != nil {
		t.Fatal(err)
	}
	if got, err := c.WaitForSignal(ctx, "run-1", "c", in); err != nil || string(got) != "z" {
		t.Fatalf("WaitForSignal in another namespace: %q %v", got, err)
	}
	if _, err := c.GetWait(ctx, &pb.GetWaitRequest{TurnId: "run-1", Name: "c"}); !errors.Is(err, stepwell.ErrWaitNotFound) {
		t.Fatalf("the other namespace's wait in the client's: %v", err)
	}
	if _, err := c.CreateWait(ctx, &pb.CreateWaitRequest{TurnId: "run-1", Name: strings.Repeat("n", 300)}); !errors.Is(err, stepwell.ErrInvalidArgument) {
		t.Fatalf("CreateWait with a 300-byte name: %v", err)
	}
}

// A sidecar killed and started again under a waiting run: the waiter
// retries UNAVAILABLE until it is back, and is woken by a signal sent after.
// The client makes one attempt a call, so that only WaitForSignal's own
// retries carry the waiter across the restart, however long it takes.
func TestWaitAcrossSidecarRestart(t *testing.T) {
	s := newOwnSidecar(t)
	awaiting := make(chan struct{})
	var once sync.Once
	seeAwait := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/Await") {
			once.Do(func() { close(awaiting) })
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c := dialTo(t, s.target, stepwell.WithNamespace(freshNS(t, "waits")), stepwell.WithRetry(1, 20*time.Millisecond),
		stepwell.WithDialOptions(grpc.WithChainUnaryInterceptor(seeAwait)))
	waiter := inBackground(func() ([]byte, error) { return c.WaitForSignal(ctx, "run-1", "approve") })
	select {
	case <-awaiting:
	case <-time.After(60 * time.Second):
		t.Fatal("WaitForSignal made no Await within 60s")
	}
	s.Stop()
	s.Start()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.Signal(ctx, "run-1", "approve", []byte("yes"))
		if err == nil {
			break
		}
		if !errors.Is(err, stepwell.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("Signal after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if o := await(t, waiter); o.err != nil || string(o.payload) != "yes" {
		t.Fatalf("WaitForSignal across the restart: %q %v", o.payload, o.err)
	}
}

// A run that begins to wait while no sidecar listens: WaitForSignal and
// SleepUntil keep trying to make their waits, past the client's own
// retries, until a sidecar starts on the address, then wait on them there.
func TestWaitBegunWhileSidecarDown(t *testing.T) {
	s := reserveSidecar(t, false)
	ns := freshNS(t, "waitsdown")
	watchW, waiterRetrying := afterFailures("CreateWait", 3)
	watchS, sleeperRetrying := afterFailures("CreateWait", 3)
	cw := dialTo(t, s.target, stepwell.WithNamespace(ns), stepwell.WithRetry(2, 20*time.Millisecond), watchW)
	cs := dialTo(t, s.target, stepwell.WithNamespace(ns), stepwell.WithRetry(2, 20*time.Millisecond), watchS)
	waiter := inBackground(func() ([]byte, error) { return cw.WaitForSignal(ctx, "run-1", "approve") })
	sleeper := inBackground(func() ([]byte, error) { return nil, cs.SleepUntil(ctx, "run-1", "cool-off", time.Now()) })
	for _, retrying := range []<-chan struct{}{waiterRetrying, sleeperRetrying} {
		select {
		case <-retrying:
		case o := <-waiter:
			t.Fatalf("WaitForSignal gave up making its wait within the client's own retries: %q %v", o.payload, o.err)
		case o := <-sleeper:
			t.Fatalf("SleepUntil gave up making its wait within the client's own retries: %v", o.err)
		case <-time.After(120 * time.Second):
			t.Fatal("CreateWait was not retried within 120s")
		}
	}
	s.Start()
	signaller := dialTo(t, s.target, stepwell.WithNamespace(ns))
	untilWaitExists(t, signaller, "run-1", "approve")
	if _, err := signaller.Signal(ctx, "run-1", "approve", []byte("yes")); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if o := await(t, waiter); o.err != nil || string(o.payload) != "yes" {
		t.Fatalf("WaitForSignal begun while the sidecar was down: %q %v", o.payload, o.err)
	}
	if o := await(t, sleeper); o.err != nil {
		t.Fatalf("SleepUntil begun while the sidecar was down: %v", o.err)
	}
	if w := getWait(t, signaller, "run-1", "cool-off"); w.GetStatus() != pb.WaitStatus_WAIT_STATUS_RESOLVED {
		t.Fatalf("the sleep's wait: %v", w)
	}
}

// The wait methods fill the client's namespace in on a copy, as every
// method of Client does (see TestRequestsAreNotModified).
func TestWaitRequestsAreNotModified(t *testing.T) {
	ns := freshNS(t, "copy")
	c := dial(t, stepwell.WithNamespace(ns))
	unchanged(t, "CreateWait", &pb.CreateWaitRequest{TurnId: "t", Name: "a"}, func(r *pb.CreateWaitRequest) error {
		resp, err := c.CreateWait(ctx, r)
		if err == nil && resp.GetWait().GetNamespace() != ns {
			t.Fatalf("CreateWait made the wait in namespace %q, want the client's %q", resp.GetWait().GetNamespace(), ns)
		}
		return err
	})
	unchanged(t, "SignalWait", &pb.SignalRequest{TurnId: "t", Name: "a", Payload: []byte("x")}, func(r *pb.SignalRequest) error {
		_, err := c.SignalWait(ctx, r)
		return err
	})
	unchanged(t, "Await", &pb.AwaitRequest{TurnId: "t", Name: "a"}, func(r *pb.AwaitRequest) error {
		_, err := c.Await(ctx, r)
		return err
	})
	unchanged(t, "GetWait", &pb.GetWaitRequest{TurnId: "t", Name: "a"}, func(r *pb.GetWaitRequest) error {
		_, err := c.GetWait(ctx, r)
		return err
	})
	unchanged(t, "ListWaits", &pb.ListWaitsRequest{TurnId: "t"}, func(r *pb.ListWaitsRequest) error {
		resp, err := c.ListWaits(ctx, r)
		if err == nil && len(resp.GetWaits()) != 1 {
			t.Fatalf("ListWaits in the client's namespace: %v", resp)
		}
		return err
	})
	unchanged(t, "CancelWait", &pb.CancelWaitRequest{TurnId: "t", Name: "b"}, func(r *pb.CancelWaitRequest) error {
		_, err := c.CancelWait(ctx, r)
		return err
	})
}
