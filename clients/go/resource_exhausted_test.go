package stepwell_test

// RESOURCE_EXHAUSTED and its three reasons: which sentinel each matches and
// which of them the client retries. OVERLOADED (and a RESOURCE_EXHAUSTED
// without ErrorInfo) is retried with backoff; MESSAGE_TOO_LARGE and
// STORE_FULL are returned after one attempt. The oversized message goes to
// the real sidecar; the other statuses are built here and returned by an
// interceptor in place of the RPC, so the client's own retry loop decides.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

// messageBytesMax is the sidecar's default --message-bytes-max.
const messageBytesMax = 4194304

// constructed is a status as the sidecar sends it: code, with a stepwell
// ErrorInfo unless reason is "-".
func constructed(t *testing.T, code codes.Code, reason string, md map[string]string) error {
	t.Helper()
	st := status.New(code, "constructed")
	if reason == "-" {
		return st.Err()
	}
	st, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: stepwell.Domain, Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// counting returns a unary interceptor that counts attempts and, when fail
// is not nil, returns it instead of calling the sidecar.
func counting(attempts *atomic.Int32, fail error) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		if fail != nil {
			return fail
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

func TestResourceExhaustedReasonsMatchTheirSentinels(t *testing.T) {
	err := stepwell.FromError(constructed(t, codes.ResourceExhausted, "MESSAGE_TOO_LARGE", map[string]string{"limit_bytes": "4194304"}))
	var se *stepwell.Error
	if !errors.Is(err, stepwell.ErrMessageTooLarge) || !errors.As(err, &se) || se.Code != codes.ResourceExhausted {
		t.Fatalf("want ErrMessageTooLarge, got %v", err)
	}
	if limit, ok := se.LimitBytes(); !ok || limit != messageBytesMax {
		t.Fatalf("LimitBytes = %d, %v", limit, ok)
	}
	if errors.Is(err, stepwell.ErrOverloaded) || errors.Is(err, stepwell.ErrStoreFull) {
		t.Fatalf("MESSAGE_TOO_LARGE matches another reason: %v", err)
	}
	_ = errors.As(stepwell.FromError(constructed(t, codes.ResourceExhausted, "MESSAGE_TOO_LARGE", nil)), &se)
	if limit, ok := se.LimitBytes(); ok {
		t.Fatalf("LimitBytes without metadata = %d, true", limit)
	}

	err = stepwell.FromError(constructed(t, codes.ResourceExhausted, "STORE_FULL", nil))
	if !errors.Is(err, stepwell.ErrStoreFull) || errors.Is(err, stepwell.ErrOverloaded) || errors.Is(err, stepwell.ErrMessageTooLarge) {
		t.Fatalf("want ErrStoreFull only, got %v", err)
	}
	if err := stepwell.FromError(constructed(t, codes.ResourceExhausted, "OVERLOADED", nil)); !errors.Is(err, stepwell.ErrOverloaded) {
		t.Fatalf("want ErrOverloaded, got %v", err)
	}
	// An unknown or missing reason stays a plain *Error with the code.
	for _, reason := range []string{"SOMETHING_NEW", "-"} {
		err := stepwell.FromError(constructed(t, codes.ResourceExhausted, reason, nil))
		if !errors.As(err, &se) || se.Code != codes.ResourceExhausted {
			t.Fatalf("%s: want a RESOURCE_EXHAUSTED *Error, got %v", reason, err)
		}
		for _, s := range []error{stepwell.ErrOverloaded, stepwell.ErrMessageTooLarge, stepwell.ErrStoreFull} {
			if errors.Is(err, s) {
				t.Fatalf("%s: matches %v", reason, s)
			}
		}
	}
}

func TestResourceExhaustedRetriesOnlyOverloaded(t *testing.T) {
	cases := []struct {
		code     codes.Code
		reason   string // "-": no ErrorInfo
		sentinel error  // nil: only the code is checked
		attempts int32
	}{
		{codes.ResourceExhausted, "OVERLOADED", stepwell.ErrOverloaded, 5},
		{codes.ResourceExhausted, "-", nil, 5},
		{codes.ResourceExhausted, "MESSAGE_TOO_LARGE", stepwell.ErrMessageTooLarge, 1},
		{codes.ResourceExhausted, "STORE_FULL", stepwell.ErrStoreFull, 1},
		{codes.ResourceExhausted, "SOMETHING_NEW", nil, 1},
		{codes.Unavailable, "STORE_UNAVAILABLE", stepwell.ErrUnavailable, 5},
		{codes.Unavailable, "-", stepwell.ErrUnavailable, 5},
	}
	for _, tc := range cases {
		t.Run(tc.code.String()+"/"+tc.reason, func(t *testing.T) {
			var attempts atomic.Int32
			c := dial(t, stepwell.WithNamespace(freshNS(t, "exhausted")), stepwell.WithRetry(5, time.Millisecond),
				stepwell.WithDialOptions(grpc.WithUnaryInterceptor(counting(&attempts, constructed(t, tc.code, tc.reason, nil)))))
			_, err := c.Checkpoint(ctx, &pb.CheckpointRequest{TurnId: "t", Phase: "started", State: []byte(`{}`), Timestamp: stepwell.Timestamp(time.Unix(0, 0))})
			var se *stepwell.Error
			if !errors.As(err, &se) || se.Code != tc.code {
				t.Fatalf("want a %v *Error, got %v", tc.code, err)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Fatalf("want %v, got %v", tc.sentinel, err)
			}
			if got := attempts.Load(); got != tc.attempts {
				t.Fatalf("attempts = %d, want %d", got, tc.attempts)
			}
		})
	}
}

func TestOversizedCheckpointIsMessageTooLargeNotRetriedNotStored(t *testing.T) {
	var attempts atomic.Int32
	c := dial(t, stepwell.WithNamespace(freshNS(t, "too-large")), stepwell.WithRetry(5, time.Millisecond),
		stepwell.WithDialOptions(grpc.WithUnaryInterceptor(counting(&attempts, nil))))
	ts := stepwell.Timestamp(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	// A 4.5 MB JSON string: the message is over the limit.
	state := []byte(`"` + strings.Repeat("x", 4_500_000) + `"`)
	_, err := c.Checkpoint(ctx, &pb.CheckpointRequest{TurnId: "big", Phase: "started", State: state, Timestamp: ts})
	var se *stepwell.Error
	if !errors.Is(err, stepwell.ErrMessageTooLarge) || !errors.As(err, &se) || se.Code != codes.ResourceExhausted {
		t.Fatalf("want ErrMessageTooLarge, got %v", err)
	}
	if limit, ok := se.LimitBytes(); !ok || limit != messageBytesMax {
		t.Fatalf("LimitBytes = %d, %v", limit, ok)
	}
	if got := attempts.Load(); got != 1 {
		t.Fatalf("attempts = %d, want 1", got)
	}
	stored, err := c.RestoreAll(ctx, &pb.RestoreRequest{TurnId: "big"})
	if err != nil || len(stored) != 0 {
		t.Fatalf("stored %d checkpoints, err %v; want none", len(stored), err)
	}
	// The client stays usable: a small checkpoint of the same turn is stored.
	r, err := c.Checkpoint(ctx, &pb.CheckpointRequest{TurnId: "big", Phase: "started", State: []byte(`{"small":true}`), Timestamp: ts})
	if err != nil || !r.GetInserted() {
		t.Fatalf("small checkpoint: %v %v", r, err)
	}
	if stored, err := c.RestoreAll(ctx, &pb.RestoreRequest{TurnId: "big"}); err != nil || len(stored) != 1 {
		t.Fatalf("stored %d checkpoints, err %v; want 1", len(stored), err)
	}
}
