// dropProxy: an HTTP/2 proxy of a test's own between a client and a
// sidecar, which does to the next request what the test arms it with: cut
// its connection as a crashed sidecar would, reset its stream, hold it, or
// answer it itself.

package stepwell_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// What the proxy does to the next request (the next HEADERS frame a client
// sends).
type dropMode int

const (
	passRequest dropMode = iota
	// cutFIN drops the request and closes the client's connection with a
	// FIN, as the kernel does for a sidecar that was killed.
	cutFIN
	// cutRST drops the request and resets the client's connection, as the
	// kernel does for a sidecar killed with bytes it had not read yet.
	cutRST
	// resetStream drops the request, answers it with RST_STREAM(CANCEL),
	// then closes the connection: a peer in between giving up on its
	// connection to the sidecar.
	resetStream
	// holdRequest forwards the request's HEADERS but none of its DATA, so
	// the call stays in flight until its caller gives up.
	holdRequest
	// answerRequest drops the request and answers it with the proxy's own
	// trailers-only response (see answer), then closes the connection.
	answerRequest
)

const (
	frameData    = 0x0
	frameHeaders = 0x1
	frameRST     = 0x3
	http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// dropProxy passes every frame through until armed. In the TLS pass it
// ends the client's TLS with the test PKI's server certificate (asking for
// a client certificate, as the sidecar does) and dials the sidecar with the
// client certificate, so that it sees frames; its cuts close the TCP
// connection under the TLS without a close_notify, as a crash would.
type dropProxy struct {
	t         *testing.T
	ln        net.Listener
	upstream  string
	serverTLS *tls.Config // nil in plaintext
	clientTLS *tls.Config
	mu        sync.Mutex
	mode      dropMode
	answer    []byte            // the header block answerRequest sends
	conns     map[net.Conn]bool // raw client connections
	applied   chan struct{}     // one value each time an armed mode is applied
	requests  atomic.Int32      // requests (HEADERS frames) clients sent
}

func newDropProxy(t *testing.T, upstream string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{t: t, ln: ln, upstream: upstream, conns: map[net.Conn]bool{}, applied: make(chan struct{}, 16)}
	if secureArgs != nil {
		p.serverTLS, p.clientTLS = proxyTLS(t, os.Getenv("STEPWELL_TEST_TLS_DIR"))
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); p.CutAll(false); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); p.serve(c.(*net.TCPConn)) }()
		}
	}()
	return p
}

// proxyTLS is the proxy's TLS towards clients (the sidecar's certificate)
// and towards the sidecar (the client's certificate), from the test PKI.
func proxyTLS(t *testing.T, dir string) (server, client *tls.Config) {
	t.Helper()
	serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	server = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, NextProtos: []string{"h2"}}
	client = &tls.Config{Certificates: []tls.Certificate{clientCert}, RootCAs: pool,
		ServerName: "localhost", NextProtos: []string{"h2"}}
	return server, client
}

// Addr is the host:port clients dial.
func (p *dropProxy) Addr() string { return p.ln.Addr().String() }

// Arm makes the proxy apply mode to the next request of any connection.
func (p *dropProxy) Arm(mode dropMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
}

// ArmAnswer makes the proxy answer the next request with a trailers-only
// response of these headers (see trailersOnly).
func (p *dropProxy) ArmAnswer(block []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.answer = answerRequest, block
}

// WaitApplied waits (bounded) until the armed mode has met a request.
func (p *dropProxy) WaitApplied() {
	p.t.Helper()
	select {
	case <-p.applied:
	case <-time.After(30 * time.Second):
		p.t.Fatal("no request reached the proxy within 30s")
	}
}

// CutAll closes every client connection now, with an RST when reset is set,
// else with a FIN: a sidecar that goes away between calls.
func (p *dropProxy) CutAll(reset bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		closeRaw(c, reset)
	}
}

func closeRaw(c net.Conn, reset bool) {
	if reset {
		_ = c.(*net.TCPConn).SetLinger(0)
	}
	_ = c.Close()
}

// take returns the armed mode (and answer) and disarms the proxy.
func (p *dropProxy) take() (dropMode, []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	mode, answer := p.mode, p.answer
	p.mode, p.answer = passRequest, nil
	return mode, answer
}

// proxyConn is one client connection and its connection to the sidecar.
type proxyConn struct {
	raw    net.Conn // the client's TCP connection, under any TLS
	client net.Conn
	up     net.Conn
	wmu    sync.Mutex // frames to the client are written whole
	held   uint32     // the stream whose DATA is dropped (holdRequest)
}

func (p *dropProxy) serve(raw *net.TCPConn) {
	p.mu.Lock()
	p.conns[raw] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, raw)
		p.mu.Unlock()
		_ = raw.Close()
	}()
	c := &proxyConn{raw: raw, client: raw}
	var err error
	if p.serverTLS != nil {
		tc := tls.Server(raw, p.serverTLS)
		if tc.Handshake() != nil {
			return
		}
		c.client = tc
		c.up, err = tls.Dial("tcp", p.upstream, p.clientTLS)
	} else {
		c.up, err = net.Dial("tcp", p.upstream)
	}
	if err != nil {
		return
	}
	defer c.up.Close()
	go p.toClient(c)
	p.fromClient(c)
}

// toClient copies the sidecar's frames to the client, each whole, so that
// the proxy can put frames of its own between them.
func (p *dropProxy) toClient(c *proxyConn) {
	for {
		frame, err := readFrame(c.up)
		if err != nil {
			_ = c.raw.(*net.TCPConn).CloseWrite()
			return
		}
		c.wmu.Lock()
		_, err = c.client.Write(frame)
		c.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

func (p *dropProxy) fromClient(c *proxyConn) {
	preface := make([]byte, len(http2Preface))
	if _, err := io.ReadFull(c.client, preface); err != nil {
		return
	}
	if _, err := c.up.Write(preface); err != nil {
		return
	}
	for {
		frame, err := readFrame(c.client)
		if err != nil {
			return
		}
		kind, stream := frame[3], binary.BigEndian.Uint32(frame[5:9])&0x7fffffff
		if kind == frameHeaders {
			p.requests.Add(1)
			mode, answer := p.take()
			if mode != passRequest {
				if done := p.apply(c, mode, stream, frame, answer); done {
					return
				}
				continue
			}
		}
		if kind == frameData && stream == c.held {
			continue
		}
		if _, err := c.up.Write(frame); err != nil {
			return
		}
	}
}

// apply does mode to the request whose HEADERS frame is frame; done is true
// when the connection is over.
func (p *dropProxy) apply(c *proxyConn, mode dropMode, stream uint32, frame, answer []byte) (done bool) {
	defer func() { p.applied <- struct{}{} }()
	switch mode {
	case holdRequest:
		c.held = stream
		_, err := c.up.Write(frame)
		return err != nil
	case resetStream:
		c.writeFrame(frameRST, 0, stream, []byte{0, 0, 0, 0x8})
	case answerRequest:
		c.writeFrame(frameHeaders, 0x1|0x4, stream, answer)
	}
	// The client's side goes first: closing the sidecar's side ends the
	// copy towards the client, which sends a FIN of its own.
	if mode == cutRST {
		closeRaw(c.raw, true)
		_ = c.up.Close()
		return true
	}
	// A FIN, after any frame written above; what the client still sends
	// is read and dropped, so that no unread byte turns it into an RST.
	_ = c.raw.(*net.TCPConn).CloseWrite()
	_ = c.up.Close()
	_ = c.raw.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, _ = io.Copy(io.Discard, c.raw)
	return true
}

func (c *proxyConn) writeFrame(kind, flags byte, stream uint32, payload []byte) {
	frame := make([]byte, 9, 9+len(payload))
	frame[0], frame[1], frame[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	frame[3], frame[4] = kind, flags
	binary.BigEndian.PutUint32(frame[5:], stream)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.client.Write(append(frame, payload...))
}

// readFrame reads one HTTP/2 frame, header and payload.
func readFrame(r io.Reader) ([]byte, error) {
	header := make([]byte, 9)
	if _, err := io.ReadFull(r, header); err != nil {
		return nil, err
	}
	n := int(header[0])<<16 | int(header[1])<<8 | int(header[2])
	frame := make([]byte, 9+n)
	copy(frame, header)
	if _, err := io.ReadFull(r, frame[9:]); err != nil {
		return nil, err
	}
	return frame, nil
}

// trailersOnly is an HPACK header block of literal fields that are never
// indexed, so that it leaves the client's decoding table as it was.
func trailersOnly(fields ...[2]string) []byte {
	var block []byte
	for _, f := range fields {
		block = append(block, 0x10)
		block = appendHPACKInt(block, len(f[0]))
		block = append(block, f[0]...)
		block = appendHPACKInt(block, len(f[1]))
		block = append(block, f[1]...)
	}
	return block
}

// appendHPACKInt appends n as an HPACK integer with a 7-bit prefix (and the
// Huffman bit clear).
func appendHPACKInt(b []byte, n int) []byte {
	if n < 127 {
		return append(b, byte(n))
	}
	b = append(b, 127)
	for n -= 127; n >= 128; n >>= 7 {
		b = append(b, byte(n%128)|0x80)
	}
	return append(b, byte(n))
}
