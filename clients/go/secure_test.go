//go:build stepwell_tls

package stepwell_test

// The second pass of ./test: built with -tags stepwell_tls, TestMain starts
// the shared sidecar with TLS, client certificates and an auth file, all
// made by ./test in $STEPWELL_TEST_TLS_DIR, and every test client carries
// the token, the CA bundle and the client certificate. The tests here check
// what the sidecar refuses.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

// tlsDir holds ca.pem, server.pem/.key, client.pem/.key, auth.toml, token
// (an admin of every namespace) and reader-token (read only).
var tlsDir string

func init() {
	secureSetup = func() ([]string, []stepwell.Option, error) {
		tlsDir = os.Getenv("STEPWELL_TEST_TLS_DIR")
		if tlsDir == "" {
			return nil, nil, errors.New("the stepwell_tls build needs STEPWELL_TEST_TLS_DIR (made by ./test)")
		}
		token, err := readToken("token")
		if err != nil {
			return nil, nil, err
		}
		args := []string{
			"--tls-cert", filepath.Join(tlsDir, "server.pem"),
			"--tls-key", filepath.Join(tlsDir, "server.key"),
			"--tls-client-ca", filepath.Join(tlsDir, "ca.pem"),
			"--auth-file", filepath.Join(tlsDir, "auth.toml"),
		}
		return args, []stepwell.Option{stepwell.WithToken(token), stepwell.WithTLS(clientTLS())}, nil
	}
}

func readToken(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(tlsDir, name))
	return strings.TrimSpace(string(b)), err
}

func clientTLS() stepwell.TLSConfig {
	return stepwell.TLSConfig{
		CAFile:   filepath.Join(tlsDir, "ca.pem"),
		CertFile: filepath.Join(tlsDir, "client.pem"),
		KeyFile:  filepath.Join(tlsDir, "client.key"),
	}
}

// dialCounting dials the shared sidecar over mTLS with opts (no default
// token) and counts the attempts each call makes.
func dialCounting(t *testing.T, attempts *atomic.Int32, opts ...stepwell.Option) *stepwell.Client {
	t.Helper()
	all := append([]stepwell.Option{
		stepwell.WithTLS(clientTLS()), stepwell.WithRetry(5, time.Millisecond), stepwell.WithNamespace(freshNS(t, "secure")),
		stepwell.WithDialOptions(grpc.WithUnaryInterceptor(counting(attempts, nil))),
	}, opts...)
	c, err := stepwell.Dial(target, all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestSecureWrongOrMissingTokenIsUnauthenticated(t *testing.T) {
	const wrong = "not-the-token-8c1d"
	for name, opts := range map[string][]stepwell.Option{
		"wrong token": {stepwell.WithToken(wrong)},
		"no token":    nil,
	} {
		t.Run(name, func(t *testing.T) {
			var attempts atomic.Int32
			c := dialCounting(t, &attempts, opts...)
			_, err := c.Get(ctx, &pb.GetRequest{Key: "k"})
			var se *stepwell.Error
			if !errors.Is(err, stepwell.ErrUnauthenticated) || !errors.As(err, &se) || se.Reason != "UNAUTHENTICATED" {
				t.Fatalf("want ErrUnauthenticated with reason UNAUTHENTICATED, got %v", err)
			}
			if n := attempts.Load(); n != 1 {
				t.Fatalf("attempts = %d, want 1 (never retried)", n)
			}
			if strings.Contains(fmt.Sprintf("%v %+v", err, err), wrong) {
				t.Fatalf("the error shows the token: %v", err)
			}
			_, err = stepwell.Once(ctx, c, "k", func(context.Context, stepwell.OnceInfo) (int, error) { return 1, nil })
			if !errors.Is(err, stepwell.ErrUnauthenticated) {
				t.Fatalf("Once: want ErrUnauthenticated, got %v", err)
			}
		})
	}
}

func TestSecureReaderCannotWrite(t *testing.T) {
	reader, err := readToken("reader-token")
	if err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int32
	c := dialCounting(t, &attempts, stepwell.WithToken(reader))
	if _, err := c.Restore(ctx, &pb.RestoreRequest{TurnId: "t"}); err != nil {
		t.Fatalf("a reader's Restore: %v", err)
	}
	attempts.Store(0)
	_, err = c.Checkpoint(ctx, &pb.CheckpointRequest{TurnId: "t", Phase: "started", State: []byte(`{}`), Timestamp: stepwell.Timestamp(time.Unix(1, 0))})
	var se *stepwell.Error
	if !errors.Is(err, stepwell.ErrPermissionDenied) || !errors.As(err, &se) || se.Reason != "PERMISSION_DENIED" {
		t.Fatalf("want ErrPermissionDenied with reason PERMISSION_DENIED, got %v", err)
	}
	if n := attempts.Load(); n != 1 {
		t.Fatalf("attempts = %d, want 1 (never retried)", n)
	}
}

func TestSecureClientCertificateRequired(t *testing.T) {
	token, err := readToken("token")
	if err != nil {
		t.Fatal(err)
	}
	c, err := stepwell.Dial(target, stepwell.WithToken(token), stepwell.WithTLS(stepwell.TLSConfig{CAFile: filepath.Join(tlsDir, "ca.pem")}),
		stepwell.WithRetry(1, 0), stepwell.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Restore(ctx, &pb.RestoreRequest{TurnId: "t"}); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}

func TestSecurePlaintextIsRefused(t *testing.T) {
	token, err := readToken("token")
	if err != nil {
		t.Fatal(err)
	}
	c, err := stepwell.Dial(target, stepwell.WithToken(token), stepwell.WithRetry(1, 0), stepwell.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Restore(ctx, &pb.RestoreRequest{TurnId: "t"}); err == nil {
		t.Fatal("a plaintext client was served by the TLS sidecar")
	}
}
