package stepwell_test

// The token and TLS options against an in-process gRPC server that answers
// every call with the status under test and records what arrived: the token
// rides on every call (Once and StoreCheckpoint included), is never retried
// on UNAUTHENTICATED or PERMISSION_DENIED, and shows up in no error or
// printed client; TLS checks the server against the CA file and presents
// the client certificate.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

const testToken = "tok-3f9a1c7e5b2d4f60"

// arrival is one call as the fake server saw it.
type arrival struct {
	method        string
	authorization []string
	clientCertCNs []string
}

// fakeSidecar answers every RPC with answer and records the calls.
type fakeSidecar struct {
	addr   string
	answer *status.Status
	mu     sync.Mutex
	calls  []arrival
}

func (f *fakeSidecar) record() []arrival {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]arrival(nil), f.calls...)
}

func startFake(t *testing.T, code codes.Code, reason string, creds credentials.TransportCredentials) *fakeSidecar {
	t.Helper()
	st, err := status.New(code, "rejected by the fake sidecar").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: stepwell.Domain})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSidecar{answer: st}
	handler := func(_ any, stream grpc.ServerStream) error {
		a := arrival{}
		a.method, _ = grpc.MethodFromServerStream(stream)
		md, _ := metadata.FromIncomingContext(stream.Context())
		a.authorization = md.Get("authorization")
		if p, ok := peer.FromContext(stream.Context()); ok {
			if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
				for _, c := range info.State.PeerCertificates {
					a.clientCertCNs = append(a.clientCertCNs, c.Subject.CommonName)
				}
			}
		}
		f.mu.Lock()
		f.calls = append(f.calls, a)
		f.mu.Unlock()
		return f.answer.Err()
	}
	opts := []grpc.ServerOption{grpc.UnknownServiceHandler(handler)}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	srv := grpc.NewServer(opts...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return f
}

// everyCall makes each kind of call the client has, returning each error
// by name.
func everyCall(c *stepwell.Client) map[string]error {
	errs := map[string]error{}
	_, errs["Checkpoint"] = c.Checkpoint(ctx, &pb.CheckpointRequest{TurnId: "t"})
	_, errs["Restore"] = c.Restore(ctx, &pb.RestoreRequest{TurnId: "t"})
	_, errs["RestoreAll"] = c.RestoreAll(ctx, &pb.RestoreRequest{TurnId: "t"})
	_, errs["ListTurns"] = c.ListTurns(ctx, &pb.ListTurnsRequest{})
	_, errs["DeleteTurn"] = c.DeleteTurn(ctx, &pb.DeleteTurnRequest{TurnId: "t"})
	_, errs["Begin"] = c.Begin(ctx, &pb.BeginRequest{Key: "k"})
	_, errs["Complete"] = c.Complete(ctx, &pb.CompleteRequest{Key: "k"})
	_, errs["Release"] = c.Release(ctx, &pb.ReleaseRequest{Key: "k"})
	_, errs["Extend"] = c.Extend(ctx, &pb.ExtendRequest{Key: "k"})
	_, errs["Get"] = c.Get(ctx, &pb.GetRequest{Key: "k"})
	// The raw stub returns raw gRPC errors, which FromError types.
	_, err := c.IdempotencyService().Get(ctx, &pb.GetRequest{Key: "k"})
	errs["raw stub Get"] = stepwell.FromError(err)
	_, errs["Once"] = stepwell.Once(ctx, c, "k", func(_ context.Context, _ stepwell.OnceInfo) (int, error) { return 1, nil })
	cp := stepwell.NewCheckpoint(c, "flow")
	errs["StoreCheckpoint.Save"] = cp.Save(ctx, stepwell.Run{ID: "r", Flow: "flow", Status: "running"})
	_, _, errs["StoreCheckpoint.Load"] = cp.Load(ctx, "r")
	return errs
}

func TestTokenOnEveryCallTypedErrorsNotRetriedNotLeaked(t *testing.T) {
	for _, tc := range []struct {
		code     codes.Code
		reason   string
		sentinel error
	}{
		{codes.Unauthenticated, "UNAUTHENTICATED", stepwell.ErrUnauthenticated},
		{codes.PermissionDenied, "PERMISSION_DENIED", stepwell.ErrPermissionDenied},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			f := startFake(t, tc.code, tc.reason, nil)
			client, err := stepwell.Dial(f.addr, stepwell.WithToken(testToken), stepwell.WithRetry(5, time.Millisecond), stepwell.WithNamespace("ns"))
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			errs := everyCall(client)
			for name, err := range errs {
				var se *stepwell.Error
				if !errors.Is(err, tc.sentinel) || !errors.As(err, &se) || se.Code != tc.code || se.Reason != tc.reason {
					t.Errorf("%s: want %v with reason %s, got %v", name, tc.sentinel, tc.reason, err)
				}
				if strings.Contains(err.Error(), testToken) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), testToken) {
					t.Errorf("%s: the error shows the token: %v", name, err)
				}
			}
			calls := f.record()
			// One arrival per call made: nothing was retried, and every
			// call (the first RPC of Once and of each StoreCheckpoint
			// method) carried the token.
			if len(calls) != len(errs) {
				t.Fatalf("%d calls arrived for %d made: %+v", len(calls), len(errs), calls)
			}
			for _, a := range calls {
				if len(a.authorization) != 1 || a.authorization[0] != "Bearer "+testToken {
					t.Errorf("%s arrived with authorization %q", a.method, a.authorization)
				}
			}
			for _, s := range []string{fmt.Sprint(client), fmt.Sprintf("%+v", client), fmt.Sprintf("%#v", client), fmt.Sprintf("%+v", *client)} {
				if strings.Contains(s, testToken) {
					t.Errorf("the printed client shows the token: %s", s)
				}
			}
		})
	}
}

func TestWithoutTokenNoAuthorizationIsSent(t *testing.T) {
	f := startFake(t, codes.Unauthenticated, "UNAUTHENTICATED", nil)
	client, err := stepwell.Dial(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Get(ctx, &pb.GetRequest{Key: "k"}); !errors.Is(err, stepwell.ErrUnauthenticated) {
		t.Fatalf("want ErrUnauthenticated, got %v", err)
	}
	if calls := f.record(); len(calls) != 1 || len(calls[0].authorization) != 0 {
		t.Fatalf("calls: %+v", calls)
	}
}

func TestTokenNeedsTLSBeyondLoopback(t *testing.T) {
	for _, target := range []string{"127.0.0.1:1", "127.8.9.10:1", "localhost:1", "[::1]:1", "unix:/tmp/x.sock", "passthrough:///127.0.0.1:1"} {
		c, err := stepwell.Dial(target, stepwell.WithToken(testToken))
		if err != nil {
			t.Errorf("%s: plaintext with a token to a local target: %v", target, err)
			continue
		}
		c.Close()
	}
	for _, target := range []string{"10.1.2.3:50051", "stepwell.internal:443", "dns:///stepwell.internal:443", "[2001:db8::1]:1"} {
		c, err := stepwell.Dial(target, stepwell.WithToken(testToken))
		if err == nil {
			c.Close()
			t.Errorf("%s: a token was allowed over plaintext", target)
			continue
		}
		if strings.Contains(err.Error(), testToken) {
			t.Errorf("%s: the error shows the token: %v", target, err)
		}
	}
	for _, bad := range []string{"", "has space", "new\nline"} {
		c, err := stepwell.Dial("127.0.0.1:1", stepwell.WithToken(bad))
		if err == nil {
			c.Close()
			t.Errorf("token %q accepted", bad)
			continue
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
}

// pki is a throwaway CA with a server certificate for localhost/127.0.0.1
// and a client certificate, as PEM files in a temporary directory.
type pki struct {
	dir                                                  string
	caFile, serverCert, serverKey, clientCert, clientKey string
	ca                                                   *x509.Certificate
	caKey                                                *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caKey = caKey
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", der)
	p.serverCert, p.serverKey = p.issue(t, "server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = p.issue(t, "client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func (p *pki) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *pki) issue(t *testing.T, cn string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, cn+".pem", "CERTIFICATE", der), p.write(t, cn+".key", "PRIVATE KEY", keyDER)
}

// serverTLS requires a client certificate signed by the test CA.
func (p *pki) serverTLS(t *testing.T) credentials.TransportCredentials {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
}

func TestMutualTLSWithToken(t *testing.T) {
	p := newPKI(t)
	f := startFake(t, codes.PermissionDenied, "PERMISSION_DENIED", p.serverTLS(t))

	client, err := stepwell.Dial(f.addr, stepwell.WithToken(testToken),
		stepwell.WithTLS(stepwell.TLSConfig{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey}))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Get(ctx, &pb.GetRequest{Key: "k"}); !errors.Is(err, stepwell.ErrPermissionDenied) {
		t.Fatalf("want ErrPermissionDenied over mTLS, got %v", err)
	}
	calls := f.record()
	if len(calls) != 1 || len(calls[0].authorization) != 1 || calls[0].authorization[0] != "Bearer "+testToken ||
		len(calls[0].clientCertCNs) == 0 || calls[0].clientCertCNs[0] != "client" {
		t.Fatalf("calls: %+v", calls)
	}

	// Without the client certificate the handshake fails: nothing arrives.
	noCert, err := stepwell.Dial(f.addr, stepwell.WithTLS(stepwell.TLSConfig{CAFile: p.caFile}), stepwell.WithRetry(1, 0), stepwell.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	if _, err := noCert.Get(ctx, &pb.GetRequest{Key: "k"}); err == nil || errors.Is(err, stepwell.ErrPermissionDenied) {
		t.Fatalf("want a handshake failure without a client certificate, got %v", err)
	}
	// A server certificate from another CA is not trusted.
	other := newPKI(t)
	wrongCA, err := stepwell.Dial(f.addr, stepwell.WithTLS(stepwell.TLSConfig{CAFile: other.caFile, CertFile: p.clientCert, KeyFile: p.clientKey}),
		stepwell.WithRetry(1, 0), stepwell.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer wrongCA.Close()
	if _, err := wrongCA.Get(ctx, &pb.GetRequest{Key: "k"}); err == nil || errors.Is(err, stepwell.ErrPermissionDenied) {
		t.Fatalf("want an untrusted server certificate to fail, got %v", err)
	}
	if n := len(f.record()); n != 1 {
		t.Fatalf("%d calls arrived; the failed handshakes let some through", n)
	}
	// Bad TLS files are Dial errors.
	for _, cfg := range []stepwell.TLSConfig{
		{CAFile: filepath.Join(p.dir, "missing.pem")},
		{CAFile: p.serverKey},
		{CAFile: p.caFile, CertFile: p.clientCert},
		{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.serverKey},
	} {
		if c, err := stepwell.Dial(f.addr, stepwell.WithTLS(cfg)); err == nil {
			c.Close()
			t.Errorf("%+v: Dial accepted it", cfg)
		}
	}
}
