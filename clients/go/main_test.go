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
	cmd := exec.Command(binPath, "serve", "--listen", listen, "--database-url", "sqlite://"+db)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if os.Getenv("STEPWELL_TEST_VERBOSE") == "" {
		cmd.Stdout, cmd.Stderr = nil, nil
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c, err := stepwell.Dial(dial, stepwell.WithTimeout(time.Second), stepwell.WithRetry(1, 0))
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
	cmd, err := startSidecar(target, target, filepath.Join(tmpDir, "x.db"))
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
	c, err := stepwell.Dial(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func asError(err error, target **stepwell.Error) bool { return errors.As(err, target) }
