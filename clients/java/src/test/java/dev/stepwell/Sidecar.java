package dev.stepwell;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * A real stepwell sidecar on a temporary SQLite file. As a JUnit extension it starts one sidecar
 * per test run (kept in the root store, stopped at the end); {@link #start(String)} starts extra
 * ones (e.g. on a Unix socket).
 */
public final class Sidecar implements ExtensionContext.Store.CloseableResource {
  private static volatile Sidecar shared;

  final String target;
  private final Process process;
  private final Path log;

  /**
   * The directory ./test makes for its second pass (CA, server and client certificates, auth.toml,
   * an admin token and a read-only reader-token), or null: then the shared sidecar is plaintext.
   */
  static final String TLS_DIR = System.getenv("STEPWELL_TEST_TLS_DIR");

  private final boolean secure;

  private Sidecar(String listen, Path dir, boolean secure) throws IOException {
    this.target = listen;
    this.secure = secure;
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
    ProcessBuilder pb = new ProcessBuilder(args);
    pb.environment().putIfAbsent("STEPWELL_LOG", "warn");
    // No admin listener: sidecars side by side would contend for its port.
    pb.environment().put("STEPWELL_ADMIN_LISTEN", "off");
    pb.redirectErrorStream(true).redirectOutput(log.toFile());
    this.process = pb.start();
    waitReady(Duration.ofSeconds(60));
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
    StepwellClient.Builder b = StepwellClient.builder(target);
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

  private void waitReady(Duration limit) throws IOException {
    long deadline = System.nanoTime() + limit.toNanos();
    StepwellClient c = builder().build();
    try {
      StepwellClient probe = c.withRetry(RetryPolicy.NONE).withDeadline(Duration.ofSeconds(1));
      while (true) {
        if (!process.isAlive()) {
          throw new IllegalStateException(
              "stepwell exited with " + process.exitValue() + ":\n" + Files.readString(log));
        }
        try {
          probe.get("readiness-probe");
        } catch (KeyNotFoundException e) {
          return;
        } catch (StepwellException e) {
          // not yet serving
        }
        if (System.nanoTime() > deadline) {
          close();
          throw new IllegalStateException("stepwell did not become ready:\n" + Files.readString(log));
        }
        Thread.sleep(100);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException(e);
    } finally {
      c.close();
    }
  }

  @Override
  public void close() {
    process.destroy();
    try {
      if (!process.waitFor(10, java.util.concurrent.TimeUnit.SECONDS)) process.destroyForcibly();
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
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
