package stepwell_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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
	var serveArgs []string
	if secureSetup != nil {
		if serveArgs, secureOpts, err = secureSetup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	cmd, err := startSidecarWith(target, target, filepath.Join(tmpDir, "x.db"), serveArgs, secureOpts)
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
	c, err := stepwell.Dial(target, append(append([]stepwell.Option{}, secureOpts...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func asError(err error, target **stepwell.Error) bool { return errors.As(err, target) }
