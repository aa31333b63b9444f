// Bearer token and TLS options of Dial.

package stepwell

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc/credentials"
)

// TLSConfig names the PEM files of a TLS connection to the sidecar.
type TLSConfig struct {
	// CAFile is the bundle of CA certificates the sidecar's certificate must
	// chain to; empty means the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and its private key,
	// for a sidecar that asks for one (--tls-client-ca); set both or neither.
	CertFile string
	KeyFile  string
	// ServerName overrides the name checked against the sidecar's
	// certificate (default: the target's host, "localhost" over a Unix
	// socket).
	ServerName string
}

// WithToken sends token as "authorization: Bearer <token>" on every call.
// Unless the target is a loopback address or a Unix socket, the token is
// only ever sent over TLS (see WithTLS): Dial fails without it rather than
// put the token on the network in the clear.
func WithToken(token string) Option {
	return func(o *options) { o.token = token; o.tokenSet = true }
}

// WithTLS connects over TLS with the given files (read when Dial is called)
// instead of plaintext.
func WithTLS(cfg TLSConfig) Option {
	return func(o *options) { c := cfg; o.tls = &c }
}

// bearerToken is the per-RPC credential of WithToken. Its String and
// GoString keep the token out of anything that prints it.
type bearerToken struct {
	header     string
	requireTLS bool
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

func (b bearerToken) RequireTransportSecurity() bool { return b.requireTLS }

func (b bearerToken) String() string   { return "stepwell bearer token (redacted)" }
func (b bearerToken) GoString() string { return b.String() }

var errEmptyToken = errors.New("stepwell: WithToken: the token is empty")

// newBearerToken checks the token without ever quoting it: a token that
// would not fit in a header is reported by what is wrong with it.
func newBearerToken(token string, requireTLS bool) (bearerToken, error) {
	if token == "" {
		return bearerToken{}, errEmptyToken
	}
	for _, r := range token {
		if r < 0x21 || r > 0x7e {
			return bearerToken{}, errors.New("stepwell: WithToken: the token has a character outside printable ASCII")
		}
	}
	return bearerToken{header: "Bearer " + token, requireTLS: requireTLS}, nil
}

// transportCredentials builds the TLS credentials of cfg.
func transportCredentials(cfg TLSConfig) (credentials.TransportCredentials, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("stepwell: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("stepwell: TLS CA file %s holds no PEM certificate", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("stepwell: TLS client certificate needs both CertFile and KeyFile")
	}
	if cfg.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("stepwell: TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(tc), nil
}

// isLocal reports whether target never leaves the machine: a Unix socket,
// "localhost" or a loopback IP. Anything the client cannot tell (a DNS name)
// counts as remote.
func isLocal(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	if i := strings.Index(target, "://"); i >= 0 {
		// scheme://authority/endpoint: the endpoint is the address.
		rest := target[i+3:]
		if j := strings.Index(rest, "/"); j >= 0 {
			target = rest[j+1:]
		} else {
			target = rest
		}
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
