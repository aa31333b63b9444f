// Package stepwell is the Go client of the stepwell durable-execution
// sidecar: a gRPC client for CheckpointService, IdempotencyService and
// WaitService, Once (run a side effect at most once per key), waits (Signal,
// WaitForSignal, SleepUntil: pause a run for a person or a clock), and
// StoreCheckpoint, an implementation of the flow engine's Checkpoint
// interface.
package stepwell

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "stepwell.dev/client/gen/stepwell/v1"
)

var (
	contextCanceled = context.Canceled
	contextDeadline = context.DeadlineExceeded
)

type options struct {
	namespace   string
	timeout     time.Duration
	maxAttempts int
	backoff     time.Duration
	maxBackoff  time.Duration
	dialOptions []grpc.DialOption
	token       string // cleared by Dial once the credential holds it
	tokenSet    bool
	tls         *TLSConfig
}

// Option configures Dial.
type Option func(*options)

// WithNamespace sets the namespace used by requests that leave it empty
// (default "" = the sidecar's "default").
func WithNamespace(ns string) Option { return func(o *options) { o.namespace = ns } }

// WithTimeout sets the default per-call timeout, used when the context has no
// deadline (default 10 s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithRetry sets how many attempts a call gets on UNAVAILABLE or
// RESOURCE_EXHAUSTED/OVERLOADED (default 5) and the first backoff (default
// 50 ms, doubling with jitter up to 2 s). RESOURCE_EXHAUSTED with
// MESSAGE_TOO_LARGE or STORE_FULL is returned after one attempt.
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(o *options) { o.maxAttempts = attempts; o.backoff = backoff }
}

// WithDialOptions adds grpc.DialOptions (e.g. interceptors).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// Client is a stepwell client. It is safe for concurrent use.
type Client struct {
	conn  *grpc.ClientConn
	cp    pb.CheckpointServiceClient
	idem  pb.IdempotencyServiceClient
	waits pb.WaitServiceClient
	opts  options
}

// Dial connects to a sidecar at "host:port" or "unix:/path/to.sock". Over a
// Unix socket the HTTP/2 authority is "localhost". The connection is
// plaintext unless WithTLS is given; WithToken adds a bearer token to every
// call. The connection is made lazily; the first call waits for it (within
// its deadline).
func Dial(target string, opts ...Option) (*Client, error) {
	o := options{timeout: 10 * time.Second, maxAttempts: 5, backoff: 50 * time.Millisecond, maxBackoff: 2 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	transport := insecure.NewCredentials()
	if o.tls != nil {
		var err error
		if transport, err = transportCredentials(*o.tls); err != nil {
			return nil, err
		}
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(transport)}
	if o.tokenSet {
		token, err := newBearerToken(o.token, !isLocal(target))
		if err != nil {
			return nil, err
		}
		// The Client keeps no copy of the token: only the connection's
		// credential holds it.
		o.token = ""
		if token.requireTLS && o.tls == nil {
			return nil, errors.New("stepwell: WithToken to a non-loopback target needs WithTLS")
		}
		dopts = append(dopts, grpc.WithPerRPCCredentials(token))
	}
	if strings.HasPrefix(target, "unix:") {
		dopts = append(dopts, grpc.WithAuthority("localhost"))
	} else if !strings.Contains(target, "://") {
		target = "passthrough:///" + target
	}
	dopts = append(dopts, o.dialOptions...)
	conn, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, err
	}
	return &Client{
		conn: conn, cp: pb.NewCheckpointServiceClient(conn), idem: pb.NewIdempotencyServiceClient(conn),
		waits: pb.NewWaitServiceClient(conn), opts: o,
	}, nil
}

// String names the client by its target; it never shows credentials.
func (c *Client) String() string { return "stepwell.Client(" + c.conn.CanonicalTarget() + ")" }

// GoString is String, so that %#v shows no credentials either.
func (c *Client) GoString() string { return c.String() }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Conn returns the underlying connection (e.g. for grpc.health.v1).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Namespace returns the client's default namespace.
func (c *Client) Namespace() string { return c.opts.namespace }

// CheckpointService returns the generated stub: one call per RPC, no
// retries, no default namespace or timeout, raw gRPC errors.
func (c *Client) CheckpointService() pb.CheckpointServiceClient { return c.cp }

// IdempotencyService returns the generated stub (see CheckpointService).
func (c *Client) IdempotencyService() pb.IdempotencyServiceClient { return c.idem }

// WaitService returns the generated stub (see CheckpointService).
func (c *Client) WaitService() pb.WaitServiceClient { return c.waits }

// retryable reports whether a failed call is worth resending unchanged:
// UNAVAILABLE always; RESOURCE_EXHAUSTED when its reason is OVERLOADED or
// when it carries no ErrorInfo at all (e.g. from a proxy in between).
// MESSAGE_TOO_LARGE and STORE_FULL cannot succeed on a retry, and neither
// can UNAUTHENTICATED or PERMISSION_DENIED (the credentials stay the same).
func retryable(err error) bool {
	e, ok := err.(*Error)
	if !ok {
		return false
	}
	switch e.Code {
	case codes.Unavailable:
		return true
	case codes.ResourceExhausted:
		return e.Reason == "OVERLOADED" || e.Reason == ""
	default:
		return false
	}
}

// invoke runs one RPC with the default timeout and retries: on UNAVAILABLE
// or OVERLOADED (see retryable) it resends the same request message after a
// backoff, so a retry can only be answered as a duplicate.
func invoke[Req any, Resp any](ctx context.Context, c *Client, req Req, f func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	var zero Resp
	if _, ok := ctx.Deadline(); !ok && c.opts.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.timeout)
		defer cancel()
	}
	backoff := c.opts.backoff
	for attempt := 1; ; attempt++ {
		resp, err := f(ctx, req)
		if err == nil {
			return resp, nil
		}
		err = fromCall(ctx, err)
		if !retryable(err) || attempt >= c.opts.maxAttempts {
			return zero, err
		}
		t := time.NewTimer(jittered(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, err
		case <-t.C:
		}
		backoff = min(backoff*2, c.opts.maxBackoff)
	}
}

// jittered is a backoff of d with jitter: between d/2 and d.
func jittered(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// withNamespace returns req with an empty namespace set to the client's
// (unless it names a wait by handle). The
// caller's message is never written to: when a namespace has to be filled in,
// it goes into a copy, so a request can be reused, shared between goroutines
// or sent through two clients without one call changing what the next sends.
func withNamespace[M proto.Message](c *Client, req M) M {
	if c.opts.namespace == "" {
		return req
	}
	m := req.ProtoReflect()
	field := m.Descriptor().Fields().ByName("namespace")
	if m.IsValid() && m.Get(field).String() != "" {
		return req
	}
	// A wait's handle names its namespace too: a request by handle keeps
	// the namespace it was given, empty or not.
	if handle := m.Descriptor().Fields().ByName("handle"); handle != nil && m.IsValid() && m.Get(handle).String() != "" {
		return req
	}
	var out protoreflect.Message
	if m.IsValid() {
		out = proto.Clone(req).ProtoReflect()
	} else {
		// A nil request stands for the empty one, which Clone cannot fill in.
		out = m.Type().New()
	}
	out.Set(field, protoreflect.ValueOfString(c.opts.namespace))
	return out.Interface().(M)
}

// Checkpoint appends a checkpoint (CheckpointService.Checkpoint). An empty
// namespace is sent as the client's; req itself is never modified (this holds
// for every method of Client).
func (c *Client) Checkpoint(ctx context.Context, req *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.cp.Checkpoint)
}

// Restore returns one page of a turn's checkpoints.
func (c *Client) Restore(ctx context.Context, req *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.cp.Restore)
}

// RestoreAll returns every checkpoint of a turn, following page tokens.
func (c *Client) RestoreAll(ctx context.Context, req *pb.RestoreRequest) ([]*pb.Checkpoint, error) {
	var out []*pb.Checkpoint
	// Pages are asked for with a copy, whose page token moves on; the
	// caller's request keeps the token it came with.
	page := withNamespace(c, req)
	if page == nil {
		page = &pb.RestoreRequest{}
	} else if page == req {
		page = proto.Clone(req).(*pb.RestoreRequest)
	}
	for {
		resp, err := c.Restore(ctx, page)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetCheckpoints()...)
		if resp.GetNextPageToken() == "" {
			return out, nil
		}
		page.PageToken = resp.GetNextPageToken()
	}
}

// ListTurns returns one page of turn summaries.
func (c *Client) ListTurns(ctx context.Context, req *pb.ListTurnsRequest) (*pb.ListTurnsResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.cp.ListTurns)
}

// DeleteTurn deletes every checkpoint of a turn.
func (c *Client) DeleteTurn(ctx context.Context, req *pb.DeleteTurnRequest) (*pb.DeleteTurnResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.cp.DeleteTurn)
}

// Begin asks to perform the operation named by req.Key.
func (c *Client) Begin(ctx context.Context, req *pb.BeginRequest) (*pb.BeginResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.idem.Begin)
}

// Complete records the result of an acquired operation.
func (c *Client) Complete(ctx context.Context, req *pb.CompleteRequest) (*pb.CompleteResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.idem.Complete)
}

// Release gives up a lease, for a new attempt or permanently.
func (c *Client) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.idem.Release)
}

// Extend moves a held lease's expiry.
func (c *Client) Extend(ctx context.Context, req *pb.ExtendRequest) (*pb.ExtendResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.idem.Extend)
}

// Get reads an idempotency record without acquiring anything.
func (c *Client) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	return invoke(ctx, c, withNamespace(c, req), c.idem.Get)
}

// Timestamp converts a time to a protobuf Timestamp (nanosecond precision).
func Timestamp(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// Duration converts a duration to a protobuf Duration.
func Duration(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
