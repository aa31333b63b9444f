// Tests of calls whose connection to the sidecar is lost, through a
// dropProxy in front of the shared sidecar (plaintext, or TLS in the
// second pass): the client reports UNAVAILABLE and retries, but keeps the
// caller's own cancellation and the sidecar's own CANCELLED as they are.

package stepwell_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

var lostModes = map[dropMode]string{cutFIN: "FIN", cutRST: "RST", resetStream: "RST_STREAM(CANCEL)"}

func lostCheckpoint(turn string, n int) *pb.CheckpointRequest {
	return &pb.CheckpointRequest{TurnId: turn, Phase: "p", State: []byte(`{"n":1}`),
		Timestamp: stepwell.Timestamp(time.Unix(int64(n), 0))}
}

// warm makes a call through the proxy, so that the connection the next
// call uses is an established one. A client without retries may first
// learn here that the proxy cut its last connection, so UNAVAILABLE is
// asked again (bounded).
func warm(t *testing.T, c *stepwell.Client) {
	t.Helper()
	var err error
	for range 10 {
		if _, err = c.Restore(ctx, &pb.RestoreRequest{TurnId: "warm"}); !errors.Is(err, stepwell.ErrUnavailable) {
			break
		}
	}
	if err != nil {
		t.Fatalf("a call through the proxy: %v", err)
	}
}

// stored returns how many checkpoints turn has, asked of the sidecar
// directly.
func stored(t *testing.T, ns, turn string) int {
	t.Helper()
	all, err := dial(t, stepwell.WithNamespace(ns)).RestoreAll(ctx, &pb.RestoreRequest{TurnId: turn})
	if err != nil {
		t.Fatal(err)
	}
	return len(all)
}

func TestConnectionLostMidCallIsUnavailableAndRetried(t *testing.T) {
	p := newDropProxy(t, target)
	for mode, name := range lostModes {
		t.Run(name, func(t *testing.T) {
			ns := freshNS(t, "lost")
			once := dialTo(t, p.Addr(), stepwell.WithNamespace(ns), stepwell.WithRetry(1, 0))
			warm(t, once)
			p.Arm(mode)
			_, err := once.Checkpoint(ctx, lostCheckpoint("once", 1))
			p.WaitApplied()
			var se *stepwell.Error
			if !errors.Is(err, stepwell.ErrUnavailable) || !errors.As(err, &se) || se.Code != codes.Unavailable || se.Reason != "" {
				t.Fatalf("want UNAVAILABLE without a reason, got %v", err)
			}
			if n := stored(t, ns, "once"); n != 0 {
				t.Fatalf("the lost call stored %d checkpoints", n)
			}

			retrying := dialTo(t, p.Addr(), stepwell.WithNamespace(ns), stepwell.WithRetry(5, time.Millisecond))
			warm(t, retrying)
			p.Arm(mode)
			before := p.requests.Load()
			r, err := retrying.Checkpoint(ctx, lostCheckpoint("retried", 1))
			if err != nil || !r.GetInserted() {
				t.Fatalf("the retried call: %v, %v", r, err)
			}
			if n := p.requests.Load() - before; n != 2 {
				t.Fatalf("%d attempts reached the proxy, want 2 (the lost one and its retry)", n)
			}
			if n := stored(t, ns, "retried"); n != 1 {
				t.Fatalf("stored %d checkpoints, want 1", n)
			}
		})
	}
}

// A sidecar that goes away between calls: the next call, made at once on
// the connection the client still holds, either goes through on a new one
// or fails UNAVAILABLE, never with another code; with retries it always
// goes through. Where the client learns of the loss is a race, so it is
// run many times.
func TestConnectionLostBetweenCallsIsUnavailableAndRetried(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			ns := freshNS(t, "gone")
			pOnce, pRetrying := newDropProxy(t, target), newDropProxy(t, target)
			once := dialTo(t, pOnce.Addr(), stepwell.WithNamespace(ns), stepwell.WithRetry(1, 0))
			retrying := dialTo(t, pRetrying.Addr(), stepwell.WithNamespace(ns), stepwell.WithRetry(5, time.Millisecond))
			for i := 1; i <= 30; i++ {
				warm(t, once)
				pOnce.CutAll(reset)
				if _, err := once.Checkpoint(ctx, lostCheckpoint("once", i)); err != nil && !errors.Is(err, stepwell.ErrUnavailable) {
					t.Fatalf("round %d: want success or UNAVAILABLE, got %v", i, err)
				}
				warm(t, retrying)
				pRetrying.CutAll(reset)
				if _, err := retrying.Checkpoint(ctx, lostCheckpoint("retried", i)); err != nil {
					t.Fatalf("round %d: the retried call: %v", i, err)
				}
			}
		})
	}
}

// The caller's own cancellation stays CANCELLED (and context.Canceled) and
// is not retried, even with the call in flight on a connection that works.
func TestConnectionLostCallerCancellationStaysCancelled(t *testing.T) {
	p := newDropProxy(t, target)
	c := dialTo(t, p.Addr(), stepwell.WithNamespace(freshNS(t, "cancel")), stepwell.WithRetry(5, time.Millisecond))
	warm(t, c)
	p.Arm(holdRequest)
	before := p.requests.Load()
	cctx, cancel := context.WithCancel(ctx)
	go func() { p.WaitApplied(); cancel() }()
	_, err := c.Checkpoint(cctx, lostCheckpoint("t", 1))
	var se *stepwell.Error
	if !errors.As(err, &se) || se.Code != codes.Canceled {
		t.Fatalf("want CANCELLED, got %v", err)
	}
	if n := p.requests.Load() - before; n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

// A CANCELLED the sidecar sent with its ErrorInfo (BODY_BROKEN_OFF: the
// request body broke off) is its answer, not a lost connection: it keeps
// its code and reason and is not retried.
func TestConnectionLostSidecarCancelledStaysCancelled(t *testing.T) {
	info, err := anypb.New(&errdetails.ErrorInfo{Reason: "BODY_BROKEN_OFF", Domain: stepwell.Domain})
	if err != nil {
		t.Fatal(err)
	}
	st, err := proto.Marshal(&spb.Status{Code: int32(codes.Canceled), Message: "the request body broke off", Details: []*anypb.Any{info}})
	if err != nil {
		t.Fatal(err)
	}
	p := newDropProxy(t, target)
	c := dialTo(t, p.Addr(), stepwell.WithNamespace(freshNS(t, "broken")), stepwell.WithRetry(5, time.Millisecond))
	warm(t, c)
	p.ArmAnswer(trailersOnly(
		[2]string{":status", "200"}, [2]string{"content-type", "application/grpc"},
		[2]string{"grpc-status", "1"}, [2]string{"grpc-message", "the request body broke off"},
		[2]string{"grpc-status-details-bin", base64.RawStdEncoding.EncodeToString(st)}))
	before := p.requests.Load()
	_, err = c.Checkpoint(ctx, lostCheckpoint("t", 1))
	var se *stepwell.Error
	if !errors.As(err, &se) || se.Code != codes.Canceled || se.Reason != "BODY_BROKEN_OFF" {
		t.Fatalf("want CANCELLED with BODY_BROKEN_OFF, got %v", err)
	}
	if n := p.requests.Load() - before; n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}
