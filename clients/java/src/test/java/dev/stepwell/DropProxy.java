// DropProxy: an HTTP/2 proxy of a test's own between a client and a sidecar, which does to the next
// request what the test arms it with: cut its connection as a crashed sidecar would, reset its
// stream, hold it, or answer it itself.
package dev.stepwell;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;

/**
 * Passes every frame through until armed. In the TLS pass it ends the client's TLS with the test
 * PKI's server certificate (asking for a client certificate, as the sidecar does) and dials the
 * sidecar with the client certificate, so that it sees frames; its cuts close the TCP connection
 * under the TLS without a close_notify, as a crash would.
 */
final class DropProxy implements AutoCloseable {
  /** What the proxy does to the next request (the next HEADERS frame a client sends). */
  enum Mode {
    PASS,
    /** Drops it and closes the connection with a FIN, as the kernel does for a killed sidecar. */
    CUT_FIN,
    /** Drops it and resets the connection, as for a sidecar killed with bytes it had not read. */
    CUT_RST,
    /** Drops it, answers RST_STREAM(CANCEL), then a FIN: a proxy in between losing the sidecar. */
    RESET_STREAM,
    /** Forwards its HEADERS but none of its DATA: the call stays in flight. */
    HOLD,
    /** Drops it and answers with the proxy's own trailers-only response, then a FIN. */
    ANSWER
  }

  private static final byte[] PREFACE =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".getBytes(StandardCharsets.US_ASCII);
  private static final int DATA = 0x0;
  private static final int HEADERS = 0x1;
  private static final int RST_STREAM = 0x3;

  private final ServerSocket listener;
  private final InetSocketAddress upstream;
  private final SSLContext serverTls; // null in plaintext
  private final SSLContext clientTls;
  private final Semaphore applied = new Semaphore(0);
  private final Set<Socket> raws = ConcurrentHashMap.newKeySet();
  /** Requests (HEADERS frames) clients sent. */
  final AtomicInteger requests = new AtomicInteger();

  private Mode mode = Mode.PASS; // guarded by this
  private byte[] answer = new byte[0]; // guarded by this

  /** Listens on a free loopback port and forwards to {@code upstream} (host:port). */
  DropProxy(String upstream) throws IOException, GeneralSecurityException {
    int colon = upstream.lastIndexOf(':');
    this.upstream =
        new InetSocketAddress(
            upstream.substring(0, colon), Integer.parseInt(upstream.substring(colon + 1)));
    if (Sidecar.secure()) {
      serverTls = tls(Sidecar.tlsFile("server.pem"), Sidecar.tlsFile("server.key"));
      clientTls = tls(Sidecar.tlsFile("client.pem"), Sidecar.tlsFile("client.key"));
    } else {
      serverTls = null;
      clientTls = null;
    }
    this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    daemon(this::accept);
  }

  /** A TLS context with this certificate and key, trusting the test PKI's CA. */
  private static SSLContext tls(Path certPem, Path keyPem)
      throws IOException, GeneralSecurityException {
    CertificateFactory x509 = CertificateFactory.getInstance("X.509");
    Certificate[] chain;
    Certificate ca;
    try (InputStream in = Files.newInputStream(certPem);
        InputStream caIn = Files.newInputStream(Sidecar.tlsFile("ca.pem"))) {
      chain = x509.generateCertificates(in).toArray(new Certificate[0]);
      ca = x509.generateCertificate(caIn);
    }
    String pem = Files.readString(keyPem).replaceAll("-----[A-Z ]+-----|\\s", "");
    PrivateKey key =
        KeyFactory.getInstance("EC")
            .generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(pem)));
    char[] password = "proxy".toCharArray();
    KeyStore keys = KeyStore.getInstance("PKCS12");
    keys.load(null, null);
    keys.setKeyEntry("key", key, password, chain);
    KeyStore trust = KeyStore.getInstance("PKCS12");
    trust.load(null, null);
    trust.setCertificateEntry("ca", ca);
    KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
    kmf.init(keys, password);
    TrustManagerFactory tmf =
        TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
    tmf.init(trust);
    SSLContext context = SSLContext.getInstance("TLS");
    context.init(kmf.getKeyManagers(), tmf.getTrustManagers(), null);
    return context;
  }

  /** The host:port clients dial. */
  String target() {
    return "127.0.0.1:" + listener.getLocalPort();
  }

  /** Applies {@code mode} to the next request of any connection. */
  synchronized void arm(Mode mode) {
    this.mode = mode;
  }

  /** Answers the next request with a trailers-only response of this header block. */
  synchronized void armAnswer(byte[] block) {
    this.mode = Mode.ANSWER;
    this.answer = block.clone();
  }

  /** Waits (bounded) until the armed mode has met a request. */
  void awaitApplied() throws InterruptedException {
    if (!applied.tryAcquire(30, TimeUnit.SECONDS)) {
      throw new AssertionError("no request reached the proxy within 30s");
    }
  }

  /** Closes every client connection now, with an RST when reset, else a FIN. */
  void cutAll(boolean reset) throws IOException {
    for (Socket raw : raws) closeRaw(raw, reset);
  }

  @Override
  public void close() throws IOException {
    listener.close();
    cutAll(true);
  }

  private static void closeRaw(Socket raw, boolean reset) throws IOException {
    if (raw.isClosed()) return;
    if (reset) {
      raw.setSoLinger(true, 0);
      raw.close();
    } else {
      raw.shutdownOutput();
    }
  }

  private static void daemon(Runnable r) {
    Thread t = new Thread(r, "drop-proxy");
    t.setDaemon(true);
    t.start();
  }

  private synchronized Mode take(byte[][] answerOut) {
    requests.incrementAndGet();
    Mode taken = mode;
    answerOut[0] = answer;
    mode = Mode.PASS;
    answer = new byte[0];
    return taken;
  }

  private void accept() {
    while (true) {
      Socket raw;
      try {
        raw = listener.accept();
      } catch (IOException e) {
        return; // closed
      }
      raws.add(raw);
      daemon(() -> serve(raw));
    }
  }

  /** One client connection and its connection to the sidecar. */
  private final class Conn {
    final Socket raw;
    final InputStream in;
    final OutputStream out; // frames to the client are written whole, under this
    final Socket up;
    int held = -1; // the stream whose DATA is dropped (HOLD)

    Conn(Socket raw) throws IOException {
      this.raw = raw;
      // Frames go out one write each: without this, Nagle's algorithm holds the next one back
      // until the peer acknowledges the last.
      raw.setTcpNoDelay(true);
      Socket client = raw;
      if (serverTls != null) {
        SSLSocket tls =
            (SSLSocket) serverTls.getSocketFactory().createSocket(raw, null, raw.getPort(), false);
        tls.setUseClientMode(false);
        SSLParameters params = tls.getSSLParameters();
        params.setNeedClientAuth(true);
        params.setApplicationProtocols(new String[] {"h2"});
        tls.setSSLParameters(params);
        tls.startHandshake();
        client = tls;
      }
      this.in = client.getInputStream();
      this.out = client.getOutputStream();
      if (clientTls != null) {
        SSLSocket tls =
            (SSLSocket)
                clientTls.getSocketFactory().createSocket(upstream.getAddress(), upstream.getPort());
        tls.setTcpNoDelay(true);
        SSLParameters params = tls.getSSLParameters();
        params.setApplicationProtocols(new String[] {"h2"});
        tls.setSSLParameters(params);
        tls.startHandshake();
        this.up = tls;
      } else {
        this.up = new Socket(upstream.getAddress(), upstream.getPort());
        this.up.setTcpNoDelay(true);
      }
    }

    void write(byte[] frame) throws IOException {
      synchronized (out) {
        out.write(frame);
        out.flush();
      }
    }
  }

  private void serve(Socket raw) {
    Conn c = null;
    try {
      c = new Conn(raw);
      Conn conn = c;
      daemon(() -> toClient(conn));
      fromClient(c);
    } catch (IOException e) {
      // the connection is over
    } finally {
      raws.remove(raw);
      try {
        raw.close();
        if (c != null) c.up.close();
      } catch (IOException e) {
        // already closed
      }
    }
  }

  /** Copies the sidecar's frames to the client, each whole, so that the proxy can add its own. */
  private void toClient(Conn c) {
    try {
      DataInputStream in = new DataInputStream(c.up.getInputStream());
      while (true) c.write(readFrame(in));
    } catch (IOException e) {
      try {
        if (!c.raw.isClosed()) c.raw.shutdownOutput();
      } catch (IOException ignored) {
        // already closed
      }
    }
  }

  private void fromClient(Conn c) throws IOException {
    DataInputStream in = new DataInputStream(c.in);
    OutputStream up = c.up.getOutputStream();
    byte[] preface = new byte[PREFACE.length];
    in.readFully(preface);
    up.write(preface);
    while (true) {
      byte[] frame = readFrame(in);
      int kind = frame[3];
      int stream =
          ((frame[5] & 0x7f) << 24)
              | ((frame[6] & 0xff) << 16)
              | ((frame[7] & 0xff) << 8)
              | (frame[8] & 0xff);
      if (kind == HEADERS) {
        byte[][] answer = new byte[1][];
        Mode m = take(answer);
        if (m != Mode.PASS) {
          if (apply(c, m, stream, frame, answer[0])) return;
          continue;
        }
      }
      if (kind == DATA && stream == c.held) continue;
      up.write(frame);
      up.flush();
    }
  }

  /** Does {@code m} to the request whose HEADERS frame is {@code frame}; true when it is over. */
  private boolean apply(Conn c, Mode m, int stream, byte[] frame, byte[] answer)
      throws IOException {
    try {
      switch (m) {
        case HOLD:
          c.held = stream;
          c.up.getOutputStream().write(frame);
          c.up.getOutputStream().flush();
          return false;
        case RESET_STREAM:
          c.write(frame(RST_STREAM, 0, stream, new byte[] {0, 0, 0, 0x8}));
          break;
        case ANSWER:
          c.write(frame(HEADERS, 0x1 | 0x4, stream, answer));
          break;
        default:
          break;
      }
      // The client's side goes first: closing the sidecar's side ends the copy towards the
      // client, which sends a FIN of its own.
      closeRaw(c.raw, m == Mode.CUT_RST);
      c.up.close();
      if (m != Mode.CUT_RST) {
        // After the FIN, what the client still sends is read and dropped, so that no unread
        // byte turns it into an RST.
        c.raw.setSoTimeout(30_000);
        c.raw.getInputStream().transferTo(OutputStream.nullOutputStream());
      }
      return true;
    } finally {
      applied.release();
    }
  }

  private static byte[] frame(int kind, int flags, int stream, byte[] payload) {
    int n = payload.length;
    byte[] f = new byte[9 + n];
    f[0] = (byte) (n >>> 16);
    f[1] = (byte) (n >>> 8);
    f[2] = (byte) n;
    f[3] = (byte) kind;
    f[4] = (byte) flags;
    f[5] = (byte) (stream >>> 24);
    f[6] = (byte) (stream >>> 16);
    f[7] = (byte) (stream >>> 8);
    f[8] = (byte) stream;
    System.arraycopy(payload, 0, f, 9, n);
    return f;
  }

  /** Reads one HTTP/2 frame, header and payload. */
  private static byte[] readFrame(DataInputStream in) throws IOException {
    byte[] header = new byte[9];
    in.readFully(header);
    int n = ((header[0] & 0xff) << 16) | ((header[1] & 0xff) << 8) | (header[2] & 0xff);
    byte[] f = new byte[9 + n];
    System.arraycopy(header, 0, f, 0, 9);
    in.readFully(f, 9, n);
    return f;
  }

  /**
   * An HPACK header block of literal fields that are never indexed, so that it leaves the client's
   * decoding table as it was; {@code fields} are name, value, name, value...
   */
  static byte[] trailersOnly(String... fields) {
    ByteArrayOutputStream block = new ByteArrayOutputStream();
    for (int i = 0; i + 1 < fields.length; i += 2) {
      block.write(0x10);
      for (String part : new String[] {fields[i], fields[i + 1]}) {
        byte[] bytes = part.getBytes(StandardCharsets.UTF_8);
        hpackInt(block, bytes.length);
        block.writeBytes(bytes);
      }
    }
    return block.toByteArray();
  }

  /** Appends n as an HPACK integer with a 7-bit prefix (and the Huffman bit clear). */
  private static void hpackInt(ByteArrayOutputStream out, int n) {
    if (n < 127) {
      out.write(n);
      return;
    }
    out.write(127);
    for (n -= 127; n >= 128; n >>>= 7) out.write((n % 128) | 0x80);
    out.write(n);
  }
}
