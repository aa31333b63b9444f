// Sidecar: a real stepwell sidecar process for the tests, shared per run or a test's own (restartable).
package dev.stepwell;

import com.google.protobuf.UnknownFieldSet;
import io.grpc.CallOptions;
import io.grpc.ChannelCredentials;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.MethodDescriptor;
import io.grpc.TlsChannelCredentials;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.channel.EventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollDomainSocketChannel;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.unix.DomainSocketAddress;
import io.grpc.stub.ClientCalls;
import java.io.ByteArrayInputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * A real stepwell sidecar on a temporary SQLite file. As a JUnit extension it starts one sidecar
 * per test run (kept in the root store, stopped at the end); {@link #start(String)} starts extra
 * ones (e.g. on a Unix socket), and {@link #own()} one that a test kills ({@link #kill()}) and
 * starts again ({@link #startAgain()}) on the same SQLite file and port.
 */
public final class Sidecar implements ExtensionContext.Store.CloseableResource {
  private static volatile Sidecar shared;

  final String target;
  private final List<String> args;
  private Process process;
  private final Path log;
  /** The temporary folder of the SQLite file and the log, deleted by {@link #close()}. */
  private final Path dir;

  /**
   * The directory ./test makes for its second pass (CA, server and client certificates, auth.toml,
   * an admin token and a read-only reader-token), or null: then the shared sidecar is plaintext.
   */
  static final String TLS_DIR = System.getenv("STEPWELL_TEST_TLS_DIR");

  private final boolean secure;

  private Sidecar(String listen, Path dir, boolean secure) throws IOException {
    this(listen, dir, secure, List.of());
  }

  private Sidecar(String listen, Path dir, boolean secure, List<String> flags) throws IOException {
    this.target = listen;
    this.secure = secure;
    this.dir = dir;
    this.log = dir.resolve("stepwell-" + UUID.randomUUID().toString().substring(0, 6) + ".log");
    List<String> args =
        new ArrayList<>(
            List.of(
                binary(),
                "serve",
                "--listen",
                listen,
                "--database-url",
                "sqlite://"
                    + dir.resolve("x-" + UUID.randomUUID().toString().substring(0, 6) + ".db")));
    if (secure) {
      Path tls = Path.of(TLS_DIR);
      args.addAll(
          List.of(
              "--tls-cert", tls.resolve("server.pem").toString(),
              "--tls-key", tls.resolve("server.key").toString(),
              "--tls-client-ca", tls.resolve("ca.pem").toString(),
              "--auth-file", tls.resolve("auth.toml").toString()));
    }
    args.addAll(flags);
    this.args = List.copyOf(args);
    launch();
  }

  /** Starts the process (appending to the log) and waits until its health answers SERVING. */
  private void launch() throws IOException {
    ProcessBuilder pb = new ProcessBuilder(args);
    pb.environment().putIfAbsent("STEPWELL_LOG", "warn");
    // No admin listener: sidecars side by side would contend for its port.
    pb.environment().put("STEPWELL_ADMIN_LISTEN", "off");
    pb.redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
    this.process = pb.start();
    waitReady(Duration.ofSeconds(60));
  }

  /**
   * A sidecar of the caller's own on a fresh SQLite file in a temporary folder and a free loopback
   * port, with TLS and auth when the shared one has them; the caller closes it.
   */
  static Sidecar own() throws IOException {
    return new Sidecar(
        "127.0.0.1:" + freePort(), Files.createTempDirectory("stepwell-java-"), secure());
  }

  /**
   * As {@link #own()}, but plaintext without auth in every pass: for scenarios whose worker
   * programs, in any language, take only an address.
   */
  static Sidecar ownPlaintext() throws IOException {
    return new Sidecar("127.0.0.1:" + freePort(), Files.createTempDirectory("stepwell-java-"), false);
  }

  /** As {@link #own()}, started with these extra flags of {@code stepwell serve}. */
  static Sidecar own(String... flags) throws IOException {
    return new Sidecar(
        "127.0.0.1:" + freePort(), Files.createTempDirectory("stepwell-java-"), secure(), List.of(flags));
  }

  /** Kills the sidecar with SIGKILL, as a crash or the OOM killer would, and waits for its exit. */
  void kill() throws InterruptedException {
    process.destroyForcibly(); // SIGKILL on Unix
    if (!process.waitFor(30, TimeUnit.SECONDS)) {
      throw new IllegalStateException("stepwell did not exit after SIGKILL");
    }
  }

  /**
   * Stops the sidecar with SIGSTOP: it keeps its socket and connections but answers nothing, as a
   * stalled process (a frozen VM, a stopped container) would, until {@link #resume()}; {@link
   * #close()} resumes it first.
   */
  void stall() throws IOException, InterruptedException {
    signal("-STOP");
    stalled = true;
  }

  /** Continues a sidecar stopped by {@link #stall()} (SIGCONT). */
  void resume() throws IOException, InterruptedException {
    if (!stalled) return;
    signal("-CONT");
    stalled = false;
  }

  private boolean stalled;

  private void signal(String sig) throws IOException, InterruptedException {
    Process k = new ProcessBuilder("kill", sig, Long.toString(process.pid())).inheritIO().start();
    if (k.waitFor() != 0) throw new IllegalStateException("kill " + sig + " failed");
  }

  /**
   * Starts the killed sidecar again on the same SQLite file and address, and waits until its
   * health service answers SERVING on a connection of its own.
   */
  void startAgain() throws IOException {
    if (process.isAlive()) throw new IllegalStateException("stepwell is still running");
    launch();
  }

  static String binary() {
    String bin = System.getenv("STEPWELL_BIN");
    if (bin != null && !bin.isEmpty()) return bin;
    String target = System.getenv("CARGO_TARGET_DIR");
    if (target == null || target.isEmpty()) target = "/root/.cache/stepwell/target";
    return target + File.separator + "debug" + File.separator + "stepwell";
  }

  static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0)) {
      return s.getLocalPort();
    }
  }

  /** Starts a plaintext sidecar listening on {@code listen} (HOST:PORT or unix:/path). */
  static Sidecar start(String listen) throws IOException {
    return new Sidecar(listen, Files.createTempDirectory("stepwell-java-"), false);
  }

  /** Whether the shared sidecar runs with TLS and auth (the second pass of ./test). */
  static boolean secure() {
    return TLS_DIR != null && !TLS_DIR.isEmpty();
  }

  /** A file of the second pass's directory. */
  static Path tlsFile(String name) {
    if (!secure()) throw new IllegalStateException("STEPWELL_TEST_TLS_DIR is not set (see ./test)");
    return Path.of(TLS_DIR, name);
  }

  /** A token file of the second pass's directory, read. */
  static String token(String name) {
    try {
      return Files.readString(tlsFile(name)).trim();
    } catch (IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  /** A builder for this sidecar, with the admin token and mutual TLS when it is secure. */
  StepwellClient.Builder builder() {
    return builder(target);
  }

  /** A builder as {@link #builder()} that dials {@code via} (e.g. a proxy in front of it). */
  StepwellClient.Builder builder(String via) {
    StepwellClient.Builder b = StepwellClient.builder(via);
    if (secure) {
      b.token(token("token"))
          .tls(tlsFile("ca.pem"), tlsFile("client.pem"), tlsFile("client.key"));
    }
    return b;
  }

  /** A client of the shared sidecar, configured as {@link #builder()}. */
  static StepwellClient client() {
    if (shared == null) throw new IllegalStateException("Sidecar.Extension did not run");
    return shared.builder().build();
  }

  /** A client of the shared sidecar that dials {@code via} (a proxy in front of it). */
  static StepwellClient clientVia(String via) {
    if (shared == null) throw new IllegalStateException("Sidecar.Extension did not run");
    return shared.builder(via).build();
  }

  /** The sidecar shared by every test class of this run. */
  static synchronized Sidecar shared(ExtensionContext context) throws IOException {
    if (shared == null) {
      Sidecar s =
          new Sidecar(
              "127.0.0.1:" + freePort(), Files.createTempDirectory("stepwell-java-"), secure());
      context.getRoot().getStore(ExtensionContext.Namespace.GLOBAL).put("stepwell-sidecar", s);
      shared = s;
    }
    return shared;
  }

  /** The health service's Check, its messages as raw protobuf bytes (no grpc-services needed). */
  private static final MethodDescriptor<byte[], byte[]> HEALTH_CHECK =
      MethodDescriptor.<byte[], byte[]>newBuilder()
          .setType(MethodDescriptor.MethodType.UNARY)
          .setFullMethodName("grpc.health.v1.Health/Check")
          .setRequestMarshaller(RawBytes.INSTANCE)
          .setResponseMarshaller(RawBytes.INSTANCE)
          .build();

  /** Passes protobuf bytes through as they are. */
  private enum RawBytes implements MethodDescriptor.Marshaller<byte[]> {
    INSTANCE;

    @Override
    public InputStream stream(byte[] value) {
      return new ByteArrayInputStream(value);
    }

    @Override
    public byte[] parse(InputStream stream) {
      try {
        return stream.readAllBytes();
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    }
  }

  /** A channel of this sidecar's own (TCP or Unix socket), for the health check. */
  private ManagedChannel channel(ChannelCredentials creds) {
    if (!target.startsWith("unix:")) return NettyChannelBuilder.forTarget(target, creds).build();
    return NettyChannelBuilder.forAddress(
            new DomainSocketAddress(target.substring("unix:".length())), creds)
        .eventLoopGroup(UNIX_LOOP)
        .channelType(EpollDomainSocketChannel.class)
        .overrideAuthority("localhost")
        .build();
  }

  /** The event loop of the health checks' Unix-socket channels (daemon threads). */
  private static final EventLoopGroup UNIX_LOOP =
      new EpollEventLoopGroup(
          1,
          r -> {
            Thread t = new Thread(r, "sidecar-health-unix");
            t.setDaemon(true);
            return t;
          });

  /**
   * Waits until the health service (overall, service "") answers SERVING (HealthCheckResponse
   * field 1 = 1), asking on a fresh connection of its own every 50 ms.
   */
  private void waitReady(Duration limit) throws IOException {
    long deadline = System.nanoTime() + limit.toNanos();
    ChannelCredentials creds = InsecureChannelCredentials.create();
    if (secure) {
      creds =
          TlsChannelCredentials.newBuilder()
              .trustManager(tlsFile("ca.pem").toFile())
              .keyManager(tlsFile("client.pem").toFile(), tlsFile("client.key").toFile())
              .build();
    }
    String last = "no answer yet";
    try {
      while (true) {
        if (!process.isAlive()) {
          throw new IllegalStateException(
              "stepwell exited with " + process.exitValue() + ":\n" + Files.readString(log));
        }
        ManagedChannel channel = channel(creds);
        try {
          byte[] response =
              ClientCalls.blockingUnaryCall(
                  channel,
                  HEALTH_CHECK,
                  CallOptions.DEFAULT.withDeadlineAfter(1, TimeUnit.SECONDS),
                  new byte[0]);
          List<Long> status = UnknownFieldSet.parseFrom(response).getField(1).getVarintList();
          if (status.equals(List.of(1L))) return;
          last = "health status " + status;
        } catch (RuntimeException e) {
          last = e.toString(); // not listening yet
        } finally {
          channel.shutdownNow();
        }
        if (System.nanoTime() > deadline) {
          String output = Files.readString(log);
          close();
          throw new IllegalStateException(
              "stepwell did not become SERVING (" + last + "):\n" + output);
        }
        Thread.sleep(50);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException(e);
    }
  }

  @Override
  public void close() {
    try {
      resume();
    } catch (IOException | InterruptedException e) {
      process.destroyForcibly(); // SIGKILL ends a stopped process too
    }
    process.destroy();
    try {
      if (!process.waitFor(10, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        process.waitFor(10, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    }
    if (process.isAlive()) return; // keep the files of a process that would not die
    try (Stream<Path> files = Files.walk(dir)) {
      files.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
    } catch (IOException e) {
      // a leftover temporary folder is no test failure
    }
  }

  /** JUnit extension: {@code @ExtendWith(Sidecar.Extension.class)} then {@link #target()}. */
  public static final class Extension implements BeforeAllCallback {
    @Override
    public void beforeAll(ExtensionContext context) throws Exception {
      shared(context);
    }
  }

  /** The shared sidecar's target, once the extension ran. */
  static String target() {
    if (shared == null) throw new IllegalStateException("Sidecar.Extension did not run");
    return shared.target;
  }
}
