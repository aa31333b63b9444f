package dev.stepwell;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
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

  private Sidecar(String listen, Path dir) throws IOException {
    this.target = listen;
    this.log = dir.resolve("stepwell-" + UUID.randomUUID().toString().substring(0, 6) + ".log");
    ProcessBuilder pb =
        new ProcessBuilder(
            binary(),
            "serve",
            "--listen",
            listen,
            "--database-url",
            "sqlite://" + dir.resolve("x-" + UUID.randomUUID().toString().substring(0, 6) + ".db"));
    pb.environment().putIfAbsent("STEPWELL_LOG", "warn");
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

  /** Starts a sidecar listening on {@code listen} (HOST:PORT or unix:/path). */
  static Sidecar start(String listen) throws IOException {
    return new Sidecar(listen, Files.createTempDirectory("stepwell-java-"));
  }

  /** The sidecar shared by every test class of this run. */
  static synchronized Sidecar shared(ExtensionContext context) throws IOException {
    if (shared == null) {
      Sidecar s = start("127.0.0.1:" + freePort());
      context.getRoot().getStore(ExtensionContext.Namespace.GLOBAL).put("stepwell-sidecar", s);
      shared = s;
    }
    return shared;
  }

  private void waitReady(Duration limit) throws IOException {
    long deadline = System.nanoTime() + limit.toNanos();
    StepwellClient c = StepwellClient.connect(target);
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
