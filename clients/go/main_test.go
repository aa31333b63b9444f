// Test harness: TestMain starts the sidecar the tests share; ownSidecar is a
// sidecar of one test's own that it can crash and start again.

package stepwell_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

var (
	target  string // host:port of the sidecar TestMain started
	tmpDir  string
	binPath string

	// secureSetup, set by the stepwell_tls build (secure_test.go), returns
	// the flags that put the shared sidecar behind TLS and auth and the
	// options every test client then needs; nil runs it in plaintext.
	secureSetup func() (serveArgs []string, clientOpts []stepwell.Option, err error)
	// secureOpts are those client options (nil in plaintext).
	secureOpts []stepwell.Option
	// secureArgs are those serve flags (nil in plaintext); a scenario's own
	// sidecar gets them too.
	secureArgs []string
)

func sidecarBin() string {
	if b := os.Getenv("STEPWELL_BIN"); b != "" {
		return b
	}
	dir := os.Getenv("CARGO_TARGET_DIR")
	if dir == "" {
		dir = "/root/.cache/stepwell/target"
	}
	return filepath.Join(dir, "debug", "stepwell")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startSidecar starts `stepwell serve` on listen with a fresh SQLite file and
// waits until it answers a Restore (bounded).
func startSidecar(listen, dial, db string) (*exec.Cmd, error) {
	return startSidecarWith(listen, dial, db, nil, nil)
}

// startSidecarWith is startSidecar with extra serve flags and the client
// options the readiness probe needs to be let in.
func startSidecarWith(listen, dial, db string, extra []string, probeOpts []stepwell.Option) (*exec.Cmd, error) {
	args := append([]string{"serve", "--listen", listen, "--database-url", "sqlite://" + db}, extra...)
	cmd := exec.Command(binPath, args...)
	// No admin listener: sidecars side by side would contend for its port.
	cmd.Env = append(os.Environ(), "STEPWELL_ADMIN_LISTEN=off")
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if os.Getenv("STEPWELL_TEST_VERBOSE") == "" {
		cmd.Stdout, cmd.Stderr = nil, nil
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c, err := stepwell.Dial(dial, append([]stepwell.Option{stepwell.WithTimeout(time.Second), stepwell.WithRetry(1, 0)}, probeOpts...)...)
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = c.Restore(ctx, &pb.RestoreRequest{TurnId: "ping"})
		cancel()
		if err == nil {
			return cmd, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
			return nil, fmt.Errorf("sidecar on %s did not answer: %w", listen, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	binPath = sidecarBin()
	if _, err := os.Stat(binPath); err != nil {
		fmt.Fprintf(os.Stderr, "stepwell binary not found at %s (set STEPWELL_BIN): %v\n", binPath, err)
		return 1
	}
	var err error
	tmpDir, err = os.MkdirTemp("", "stepwell-go-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmpDir)
	port, err := freePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	target = fmt.Sprintf("127.0.0.1:%d", port)
	if secureSetup != nil {
		if secureArgs, secureOpts, err = secureSetup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	cmd, err := startSidecarWith(target, target, filepath.Join(tmpDir, "x.db"), secureArgs, secureOpts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	}()
	return m.Run()
}

var nsCounter int

// freshNS returns a namespace no other test uses.
func freshNS(t *testing.T, prefix string) string {
	t.Helper()
	nsCounter++
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1_000_000_000, nsCounter)
}

func dial(t *testing.T, opts ...stepwell.Option) *stepwell.Client {
	t.Helper()
	return dialTo(t, target, opts...)
}

// dialTo is dial to another sidecar than the shared one.
func dialTo(t *testing.T, target string, opts ...stepwell.Option) *stepwell.Client {
	t.Helper()
	c, err := stepwell.Dial(target, append(append([]stepwell.Option{}, secureOpts...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialPlain dials target without the secure pass's TLS and token.
func dialPlain(t *testing.T, target string, opts ...stepwell.Option) *stepwell.Client {
	t.Helper()
	c, err := stepwell.Dial(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ownSidecar is a sidecar of one test's own, on a SQLite file in a
// temporary folder and a loopback port that both stay the same across
// Stop and Start, so that the test can crash it and bring it back.
type ownSidecar struct {
	t      *testing.T
	target string // host:port
	db     string
	plain  bool // without the secure pass's TLS and auth flags
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// newOwnSidecar starts a sidecar for t on a fresh database and a free port
// (with the secure pass's TLS and auth flags, if any) and stops it when t
// ends.
func newOwnSidecar(t *testing.T) *ownSidecar {
	return startOwnSidecar(t, false)
}

// newPlainSidecar is newOwnSidecar without TLS and auth in either pass, for
// the scenarios that drive worker processes, whose command line names an
// address alone (clients/scenarios/README.md).
func newPlainSidecar(t *testing.T) *ownSidecar {
	return startOwnSidecar(t, true)
}

func startOwnSidecar(t *testing.T, plain bool) *ownSidecar {
	t.Helper()
	s := reserveSidecar(t, plain)
	s.Start()
	return s
}

// reserveSidecar is a sidecar for t not started yet: a free port where
// nothing listens until Start, and a SQLite file. It is stopped when t ends.
func reserveSidecar(t *testing.T, plain bool) *ownSidecar {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &ownSidecar{t: t, target: fmt.Sprintf("127.0.0.1:%d", port), db: filepath.Join(t.TempDir(), "own.db"), plain: plain}
	t.Cleanup(func() {
		if s.cmd != nil {
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
	return s
}

// Stop kills the sidecar with SIGKILL, as a crash would, and waits for the
// process to exit.
func (s *ownSidecar) Stop() {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatal("sidecar stop: it is not running")
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("sidecar stop: %v", err)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Fatal("sidecar stop: the process did not exit within 30s of SIGKILL")
	}
	s.cmd = nil
}

// Start starts the sidecar on the same file and port, then waits until its
// health service answers SERVING on a connection of its own (bounded).
func (s *ownSidecar) Start() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("sidecar start: it is already running")
	}
	args := []string{"serve", "--listen", s.target, "--database-url", "sqlite://" + s.db}
	if !s.plain {
		args = append(args, secureArgs...)
	}
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), "STEPWELL_ADMIN_LISTEN=off")
	if os.Getenv("STEPWELL_TEST_VERBOSE") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("sidecar start: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	// The probe is a connection of the runner's own, fresh at every start,
	// with a short reconnect backoff so that it sees the sidecar come up
	// promptly; the scenario's client keeps its defaults.
	security := secureOpts
	if s.plain {
		security = nil
	}
	probe, err := stepwell.Dial(s.target, append(append([]stepwell.Option{}, security...),
		stepwell.WithDialOptions(grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})))...)
	if err != nil {
		s.t.Fatalf("sidecar start: %v", err)
	}
	defer probe.Close()
	health := healthpb.NewHealthClient(probe.Conn())
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		select {
		case <-exited:
			s.cmd = nil
			s.t.Fatalf("sidecar start: the process exited (%v)", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("sidecar start: health not SERVING on %s within 30s (last: %v, %v)", s.target, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// afterFailures is a client option that closes the channel it returns when
// the nth attempt at the method (its last name, e.g. "Complete") has
// failed, every attempt the client sends counted: with WithRetry(n-1, ...)
// the nth failure is an attempt beyond the client's own retries, made by
// the call above them (Once, WaitForSignal).
func afterFailures(method string, n int32) (stepwell.Option, <-chan struct{}) {
	reached := make(chan struct{})
	var failed atomic.Int32
	watch := func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, m, req, reply, cc, opts...)
		if err != nil && strings.HasSuffix(m, "/"+method) && failed.Add(1) == n {
			close(reached)
		}
		return err
	}
	return stepwell.WithDialOptions(grpc.WithChainUnaryInterceptor(watch)), reached
}

func asError(err error, target **stepwell.Error) bool { return errors.As(err, target) }
